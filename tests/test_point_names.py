"""A point without a label is named by its knobs, so that errors, progress and tables never name it
by its hash."""

from benchbay.suite import load
from tests.conftest import TINY, write_suite


def test_points_without_labels_are_named_by_their_knobs(tmp_path):
    suite = load(write_suite(tmp_path / "s.yaml", f"""
name: names
workload: {{name: "{TINY}"}}
sweep:
  points: [{{mbs: 1}}, {{mbs: 2}}, {{label: base, mbs: 4}}]
  grid: {{recompute: ["off", full]}}
steps: {{warmup: 1, measure: 1}}
"""))
    labels = [p.label for p in suite.expand()]
    assert labels == ["mbs=1 recompute=off", "mbs=1 recompute=full", "mbs=2 recompute=off",
                      "mbs=2 recompute=full", "base recompute=off", "base recompute=full"]
    assert len(set(labels)) == len(labels)
