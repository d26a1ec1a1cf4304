"""A suite's name is one safe path component: nothing it says writes outside the results root."""

import pytest

from benchbay.store import run_dir
from benchbay.suite import SuiteError, load
from tests.conftest import write_suite

SUITE = """
name: {name}
workload: {{name: tests.fixtures.tinywork:Tiny}}
knobs: {{precision: fp32}}
steps: {{warmup: 1, measure: 2}}
"""


@pytest.mark.parametrize("name", ["/tmp/x", "../../escaped", "..", "''", "a/b", ".hidden"])
def test_a_name_that_is_not_one_safe_path_component_is_refused(tmp_path, name):
    path = write_suite(tmp_path / "s.yaml", SUITE.format(name=name))
    with pytest.raises(SuiteError, match="name.*one path component"):
        load(path)


def test_a_safe_name_loads(tmp_path):
    assert load(write_suite(tmp_path / "s.yaml", SUITE.format(name="my-suite_2.1"))).name == "my-suite_2.1"


@pytest.mark.parametrize("suite, run_id", [("..", "r"), ("ok", "../r"), ("/abs", "r"), ("ok", "")])
def test_the_store_never_builds_a_run_folder_outside_its_root(tmp_path, suite, run_id):
    with pytest.raises(ValueError, match="one path component"):
        run_dir(tmp_path, suite, run_id)


GOOD = '{"suite": "s", "run_id": "r", "point_id": "p", "workload": "w", "status": "ok"}\n'


@pytest.mark.parametrize("content, where", [
    (b"garbage\n", "records.jsonl:1: not a JSON record"),
    (b"", "holds no records"),
    (GOOD[20:].encode() + GOOD.encode(), "records.jsonl:1: not a JSON record"),  # its first record cut
    (b"[1, 2]\n", "records.jsonl:1: expected a record"),
    (b"\xff\xfe\n", "not UTF-8"),
])
def test_a_baseline_that_cannot_be_read_is_an_error_not_no_baseline(tmp_path, content, where):
    from benchbay.baselines import BASELINES_DIR, find_baseline

    baseline = tmp_path / BASELINES_DIR / "machine" / "main"
    baseline.mkdir(parents=True)
    (baseline / "records.jsonl").write_bytes(content)
    for kwargs in ({"name": "main"}, {"suite": "s"}, {}):
        with pytest.raises(ValueError, match=where):
            find_baseline(tmp_path, "machine", **kwargs)


def test_a_readable_baseline_is_found(tmp_path):
    from benchbay.baselines import BASELINES_DIR, find_baseline

    baseline = tmp_path / BASELINES_DIR / "machine" / "main"
    baseline.mkdir(parents=True)
    (baseline / "records.jsonl").write_text(GOOD)
    assert find_baseline(tmp_path, "machine", suite="s") == baseline


def test_reading_results_never_imports_the_module_a_record_names(tmp_path, monkeypatch):
    import json
    import sys

    from benchbay.store import load_runs

    (tmp_path / "results_helper.py").write_text("open(__file__ + '.ran', 'w').close()\nclass X: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    run = tmp_path / "results" / "s" / "r"
    run.mkdir(parents=True)
    records = [{"suite": "s", "run_id": "r", "point_id": f"p{i}", "workload": "results_helper:X", "status": "ok",
                "knobs": knobs} for i, knobs in enumerate([{"mbs": 1}, {"mbs": 1, "extra": 2}])]
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    load_runs([run])
    assert "results_helper" not in sys.modules and not (tmp_path / "results_helper.py.ran").exists()
