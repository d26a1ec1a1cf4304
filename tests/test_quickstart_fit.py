"""The quickstart on a GPU runs what fits the card: params given per card memory class, chosen by
the card's memory (``suite.model.by_card_memory``), checked by validate, read by the runner."""

from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from benchbay.collect import nvml
from benchbay.launch.base import Launch
from benchbay.runner import SuiteRunner
from benchbay.suite import SuiteError, load
from benchbay.suite.model import by_card_memory
from tests.conftest import ROOT, TINY, InProcessLauncher, write_suite

QUICKSTART = ROOT / "suites" / "quickstart.yaml"
CLASSES = {24: "small", 40: "mid", 80: "large", 141: "real"}


@pytest.mark.parametrize(("memory_gb", "expected"), [
    (24, "small"), (40, "mid"), (80, "large"), (141, "real"),  # a class's own size takes it
    (25.8, "small"), (42.9, "mid"), (85.9, "large"), (150.8, "real"),  # NVML's totals of those cards
    (79.9, "mid"), (1000, "real"),  # the largest class not above the card
    (16.1, "small"), (None, "small"),  # below every class, or unknown: the smallest
])
def test_a_card_takes_the_largest_class_not_above_its_memory(memory_gb, expected):
    assert by_card_memory(CLASSES, memory_gb) == expected


# what the quickstart runs on each card: (DreamZero preset, blocks), (Wall-X preset, blocks);
# None blocks = all of the preset's. NVML's totals: RTX 4090, A100 40 GB, A100 80 GB, H200.
CARDS = {
    24: (25.8, ("dreamzero-tiny", None), ("wallx-tiny", None)),
    40: (42.9, ("dreamzero-5b", 4), ("wallx-3b", 8)),
    80: (85.9, ("dreamzero-5b", 12), ("wallx-3b", 24)),
    141: (150.8, ("dreamzero-5b", None), ("wallx-3b", None)),
}


def _models(points) -> dict[str, tuple[str, int | None]]:
    return {p.label: (p.params["preset"], p.params.get("layers")) for p in points if p.workload != "decode"}


@pytest.mark.parametrize("card", sorted(CARDS))
def test_the_quickstart_picks_what_fits_a_24_40_80_and_141_gb_card(card):
    nvml_total, dreamzero, wallx = CARDS[card]
    suite = load(QUICKSTART)
    expected = {"dreamzero": dreamzero, "dreamzero+recompute": dreamzero, "wallx": wallx, "wallx+recompute": wallx}
    assert _models(suite.expand("cuda", card)) == expected
    assert _models(suite.expand("cuda", nvml_total)) == expected


# The estimate the quickstart's choices rest on (its comments give the figures): peak allocated GiB at
# mbs 2, recompute off, bf16_mixed = fixed + per block x blocks; the allocator reserves up to 1.15x
# that (DreamZero-5B at mbs 1: 113.4 reserved / 98.3 allocated) and the CUDA context takes ~1 GiB.
ESTIMATE = {"dreamzero-5b": (15.0, 3.2, 30), "wallx-3b": (17.0, 1.55, 36)}  # fixed, per block, blocks
SMALLEST_CARD_GIB = {24: 23.6, 40: 39.4, 80: 79.2, 141: 139.8}  # what torch reads of each class's smallest


def _reserved_gib(preset: str, blocks: int | None) -> float:
    if preset.endswith("-tiny"):
        return 1.0
    fixed, per_block, all_blocks = ESTIMATE[preset]
    return 1.15 * (fixed + per_block * (blocks or all_blocks)) + 1.0


@pytest.mark.parametrize("card", sorted(CARDS))
def test_each_choice_fits_the_smallest_card_of_its_class(card):
    for preset, blocks in _models(load(QUICKSTART).expand("cuda", card)).values():
        assert _reserved_gib(preset, blocks) < SMALLEST_CARD_GIB[card], (card, preset, blocks)
    # the cut is needed: the whole models would not fit an 80 GB card
    assert _reserved_gib("dreamzero-5b", None) > SMALLEST_CARD_GIB[80]
    assert _reserved_gib("wallx-3b", None) > SMALLEST_CARD_GIB[80]


def test_the_quickstart_validates_and_keeps_its_cpu_points():
    suite = load(QUICKSTART)
    assert suite.card_classes() == [24, 40, 80, 141]
    assert _models(suite.expand("cpu")) == {"dreamzero": ("dreamzero-tiny", None),
                                            "dreamzero+recompute": ("dreamzero-tiny", None),
                                            "wallx": ("wallx-tiny", None), "wallx+recompute": ("wallx-tiny", None)}
    # a device a param names no value for leaves the param out: the CPU points' params (and ids) as before
    assert all("layers" not in p.params for p in suite.expand("cpu"))


def test_malformed_card_classes_are_named(tmp_path):
    with pytest.raises(SuiteError) as info:
        load(write_suite(tmp_path / "bad.yaml", """
name: bad
sweep:
  points:
    - {label: a, workload: {name: dreamzero, params: {preset: {cpu: dreamzero-tiny, cuda: {24GB: dreamzero-5b}}}}}
    - {label: b, workload: {name: dreamzero, params: {preset: {cuda: {}}}}}
    - {label: c, workload: {name: dreamzero, params: {preset: {cpu: {24: dreamzero-tiny}}}}}
    - {label: d, workload: {name: dreamzero, params: {layers: {cuda: {0: 4, -8: 2, true: 1, 40: [4]}}}}}
    - {label: e, workload: {name: dreamzero, params: {preset: {cuda: {24: dreamzero-6b, 80: dreamzero-5b}}}}}
"""))
    problems = {p.key: p.expected for p in info.value.problems}
    where = "sweep.points[{}].workload.params."
    assert problems[where.format(0) + "preset.cuda.24GB"] == \
        "a card memory class: a number of GB > 0 (24, 40, 80, 141), got '24GB'"
    assert problems[where.format(1) + "preset.cuda"].startswith("a value, or one per card memory class in GB")
    assert problems[where.format(2) + "preset.cpu"].startswith("a value (the CPU has no card memory classes)")
    for key in ("0", "-8", "True"):
        assert problems[where.format(3) + "layers.cuda." + key].endswith(f"got {key}")
    assert problems[where.format(3) + "layers.cuda.40"] == "a value, got [4]"
    assert problems[where.format(4) + "preset"].endswith("got 'dreamzero-6b'")  # each class's value checked
    assert len(problems) == 8


def test_points_must_differ_on_every_card_class(tmp_path):
    with pytest.raises(SuiteError, match="'a' and 'b' have the same workload, params and knobs on a 24 GB card"):
        load(write_suite(tmp_path / "same.yaml", f"""
name: same
sweep:
  points:
    - {{label: a, workload: {{name: "{TINY}", params: {{width: {{cpu: 4, cuda: {{24: 8, 80: 64}}}}}}}}}}
    - {{label: b, workload: {{name: "{TINY}", params: {{width: {{cpu: 5, cuda: 8}}}}}}}}
"""))


@dataclass(frozen=True)
class _Card(InProcessLauncher):
    """A CUDA machine of a given card, for the runner's choice (its points are never run here)."""

    card_gb: float | None = None

    def device(self, requested):
        return "cuda"

    def memory_gb(self, device):
        return self.card_gb


@pytest.mark.parametrize(("memory_gb", "dreamzero"), [(42.9, ("dreamzero-5b", 4)), (None, ("dreamzero-tiny", None))])
def test_the_runner_expands_for_its_card(tmp_path, memory_gb, dreamzero):
    runner = SuiteRunner(load(QUICKSTART), tmp_path / "results", launcher=_Card(card_gb=memory_gb))
    assert _models(p for p, _ in runner.tasks())["dreamzero"] == dreamzero


def test_the_card_memory_is_read_through_nvml_the_smallest_of_the_points_gpus(monkeypatch):
    totals = {0: 85.9e9, 1: 42.9e9, 2: 150.8e9}
    fake = SimpleNamespace(nvmlDeviceGetCount=lambda: 3, nvmlDeviceGetHandleByIndex=lambda i: i,
                           nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=totals[h]))
    monkeypatch.setattr(nvml, "library", lambda: fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert InProcessLauncher(Launch(nproc=2)).memory_gb("cuda") == pytest.approx(42.9)
    assert InProcessLauncher(Launch(nproc=1)).memory_gb("cuda") == pytest.approx(85.9)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    assert InProcessLauncher(Launch(nproc=1)).memory_gb("cuda") == pytest.approx(150.8)
    assert InProcessLauncher(Launch(nproc=1)).memory_gb("cpu") is None
    monkeypatch.setattr(nvml, "library", lambda: None)  # no NVML: unknown, the smallest class is taken
    assert InProcessLauncher(Launch(nproc=1)).memory_gb("cuda") is None
