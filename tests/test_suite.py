"""Suite files: validation names the file, key and expectation; expansion and overrides."""

import shutil
from pathlib import Path

import pytest

from benchbay.store import point_id
from benchbay.suite import SuiteError, load
from tests.conftest import TINY, write_suite

GOOD = f"""
name: s
workload: {{name: "{TINY}", params: {{width: 8}}}}
knobs: {{precision: fp32}}
sweep:
  points:
    - {{label: base}}
    - {{label: rc, recompute: full}}
  grid: {{mbs: [1, 2, 4]}}
  zip: {{seed: [0, 1], fault: [none, none]}}
  exclude: [{{recompute: full, mbs: 4}}]
steps: {{warmup: 1, measure: 2}}
breakdown: [base, rc]
"""


def test_expand_crosses_points_grid_and_zip(tmp_path):
    suite = load(write_suite(tmp_path / "s.yaml", GOOD))
    points = suite.expand()
    assert len(points) == 2 * 3 * 2
    excluded = [p for p in points if p.excluded]
    assert len(excluded) == 2 and all(p.knobs["recompute"] == "full" and p.knobs["mbs"] == 4 for p in excluded)
    assert "sweep.exclude[0]" in excluded[0].excluded
    # defaults fill every knob; fixed knobs apply; labels carry the varied values
    assert all(p.knobs["precision"] == "fp32" and p.knobs["compile"] == "off" for p in points)
    assert points[0].label == "base mbs=1 seed=0 fault=none"
    assert len({p.point_id for p in points}) == len(points)


def test_off_stays_a_string(tmp_path):
    suite = load(write_suite(tmp_path / "s.yaml", GOOD.replace("precision: fp32", "precision: fp32, compile: off")))
    assert suite.knobs["compile"] == "off"


def test_overrides(tmp_path):
    path = write_suite(tmp_path / "s.yaml", GOOD)
    suite = load(path, ["steps.measure=7", "sweep.grid.mbs=[8]", "knobs.recompute=selective", "repeats=3"])
    assert suite.steps.measure == 7 and suite.repeats == 3
    assert {p.knobs["mbs"] for p in suite.expand()} == {8}
    with pytest.raises(SuiteError, match="knobs.mbs"):
        load(path, ["knobs.mbs=zero"])


def test_point_id_is_stable():
    assert point_id("w", {"a": 1}, {"x": 1, "y": 2}) == point_id("w", {"a": 1}, {"y": 2, "x": 1})
    assert point_id("w", {"a": 1}, {"x": 1}) != point_id("w", {"a": 2}, {"x": 1})
    assert point_id("w", {}, {"x": 1}, world_size=2) != point_id("w", {}, {"x": 1})


def test_every_problem_is_reported_with_file_and_key(tmp_path):
    path = write_suite(tmp_path / "bad.yaml", f"""
name: 3
workload: {{name: "{TINY}", params: {{widht: 8}}}}
knobs: {{precison: bf16, mbs: -1, recompute: sometimes, compile: blocks+nothing}}
sweep:
  grid: {{mbs: one}}
  zip: {{seed: [1, 2], fault: [none]}}
  search: {{knob: mbs, min: 8, max: 60, step: 8, memory_snapshots: "no"}}
steps: {{warmup: -1, measure: 0, steady: later}}
repeats: zero
compile_cache: shared
devices: {{type: tpu, torchrun: "yes"}}
breakdown: [nope]
equivalent_tolerance: {{rtol: -1, relative: 0.1}}
extra_key: 1
""")
    with pytest.raises(SuiteError) as info:
        load(path)
    text = str(info.value)
    problems = {p.key: p.expected for p in info.value.problems}
    assert all(p.file == str(path) for p in info.value.problems)
    assert "name" in problems and "a string" in problems["name"]
    assert "workload.params.widht" in problems and "width" in problems["workload.params.widht"]
    # an unknown knob lists the known ones
    assert "knobs.precison" in problems and "precision" in problems["knobs.precison"]
    assert "knobs.mbs" in problems and "positive integer" in problems["knobs.mbs"]
    assert "one of ['off', 'full', 'selective', 'attention']" in problems["knobs.recompute"]
    assert "blocks" in problems["knobs.compile"]
    assert problems["compile_cache"] == "one of ['point', 'run'], got 'shared'"
    for key in ("sweep.grid.mbs", "sweep.zip", "steps.warmup", "steps.measure", "steps.steady", "repeats",
                "devices.type", "devices.torchrun", "sweep.search.step", "sweep.search.memory_snapshots",
                "breakdown[0]", "extra_key", "equivalent_tolerance.rtol", "equivalent_tolerance.relative"):
        assert key in problems, (key, text)


def test_missing_or_unknown_workload(tmp_path):
    with pytest.raises(SuiteError) as info:
        load(write_suite(tmp_path / "a.yaml", "name: a\n"))
    assert [p.key for p in info.value.problems] == ["workload"]
    with pytest.raises(SuiteError, match="workload.name: unknown workload 'nosuch'"):
        load(write_suite(tmp_path / "b.yaml", "name: b\nworkload: nosuch\n"))


def test_a_param_naming_a_preset_must_name_one(tmp_path):
    with pytest.raises(SuiteError) as info:
        load(write_suite(tmp_path / "p.yaml", "name: p\nworkload: {name: dreamzero, params: "
                                              "{preset: dreamzero-6b, video_preset: {cpu: droid, cuda: lerobot2}}}\n"))
    problems = {p.key: p.expected for p in info.value.problems}
    assert problems["workload.params.preset"].startswith("one of ['dreamzero-5b', 'dreamzero-14b'")
    assert problems["workload.params.preset"].endswith("got 'dreamzero-6b'")
    assert problems["workload.params.video_preset"].endswith("got 'lerobot2'")


def test_not_yaml(tmp_path):
    with pytest.raises(SuiteError, match="valid YAML"):
        load(write_suite(tmp_path / "c.yaml", "name: [unclosed\n"))
    with pytest.raises(SuiteError, match="does not exist"):
        load(tmp_path / "none.yaml")


def test_points_may_name_their_own_workload_and_per_device_params(tmp_path):
    suite = load(write_suite(tmp_path / "mixed.yaml", f"""
name: mixed
knobs: {{mbs: 2, fault: none}}
sweep:
  points:
    - {{label: a, workload: {{name: "{TINY}", params: {{width: {{cpu: 4, cuda: 64}}}}}}}}
    - {{label: b, workload: "{TINY}", recompute: full}}
"""))
    cpu, cuda = suite.expand("cpu"), suite.expand("cuda")
    assert [p.params for p in cpu] == [{"width": 4}, {}] and cuda[0].params == {"width": 64}
    assert cpu[0].point_id != cuda[0].point_id
    assert all(p.workload == TINY and p.knobs["mbs"] == 2 for p in cpu)
    with pytest.raises(SuiteError) as info:
        load(write_suite(tmp_path / "bad.yaml", f"""
name: bad
sweep:
  points:
    - {{workload: {{name: "{TINY}", params: {{width: {{tpu: 3}}}}}}, warp: 1}}
    - {{workload: nosuch}}
"""))
    keys = {p.key for p in info.value.problems}
    assert {"sweep.points[0].workload.params.width", "sweep.points[0].warp", "sweep.points[1].workload.name"} <= keys


def test_points_measuring_the_same_configuration_are_rejected(tmp_path):
    with pytest.raises(SuiteError, match="'baseline' and 'eager' have the same workload, params and knobs"):
        load(write_suite(tmp_path / "dup.yaml", f"""
name: dup
workload: "{TINY}"
sweep: {{points: [{{label: baseline}}, {{label: eager, recompute: "off"}}]}}
"""))


def test_steady_window_must_lie_within_the_steps(tmp_path):
    with pytest.raises(SuiteError, match=r"steps.steady: 0 <= first < end <= warmup \+ measure \(13\), got \[20, 30\]"):
        load(write_suite(tmp_path / "st.yaml", f"""
name: st
workload: "{TINY}"
steps: {{warmup: 3, measure: 10, steady: [20, 30]}}
"""))


def test_suite_knobs_are_checked_against_every_workload_of_the_points(tmp_path):
    """quickstart: every point names its workload; a suite knob goes to each that knows it."""
    path = write_suite(tmp_path / "mixed.yaml", f"""
name: mixed
knobs: {{mbs: 2}}
sweep:
  points:
    - {{label: a, workload: "{TINY}"}}
    - {{label: b, workload: {{name: decode}}, backend: pyav}}
""")
    assert {p.knobs["mbs"] for p in load(path).expand()} == {2}
    with pytest.raises(SuiteError) as info:
        load(path, ["knobs.mbs=abc", "knobs.backend=nosuch", "knobs.warp=1"])
    problems = {p.key: p.expected for p in info.value.problems}
    assert problems["knobs.mbs"] == "a positive integer, got 'abc'"
    assert problems["knobs.backend"].startswith("one of [")  # decode's own knob, checked against decode
    assert "a knob of ['decode', 'tiny']" in problems["knobs.warp"]
    assert len(info.value.problems) == 3  # the same problem is said once, not once per workload


def test_empty_points_and_missing_data_are_errors(tmp_path):
    with pytest.raises(SuiteError) as info:
        load(write_suite(tmp_path / "e.yaml", f"""
name: e
workload: {{name: decode, params: {{root: {tmp_path / "nosuch"}}}}}
sweep: {{points: []}}
"""))
    problems = {p.key: p.expected for p in info.value.problems}
    assert problems["sweep.points"].startswith("at least one point")
    assert problems["workload.params.root"] == f"an existing path (data on disk), got '{tmp_path / 'nosuch'}': " \
        "it does not exist"
    existing = f"name: ok\nworkload: {{name: decode, params: {{root: {tmp_path}}}}}\n"
    assert load(write_suite(tmp_path / "ok.yaml", existing)).params == {"root": str(tmp_path)}


def test_a_measure_budget_is_seconds_for_one_unprofiled_process(tmp_path):
    suite = load(write_suite(tmp_path / "ok.yaml", f'name: ok\nworkload: "{TINY}"\nsteps: {{max_measure_s: 30}}\n'))
    assert suite.steps.max_measure_s == 30.0
    with pytest.raises(SuiteError) as info:
        load(write_suite(tmp_path / "bad.yaml", f"""
name: bad
workload: "{TINY}"
sweep: {{points: [{{label: a}}]}}
steps: {{max_measure_s: 30}}
profile: [a]
devices: {{nproc: 2}}
"""))
    expected = [p.expected for p in info.value.problems if p.key == "steps.max_measure_s"]
    assert any("profile" in e for e in expected) and any("ranks would stop" in e for e in expected)
    with pytest.raises(SuiteError, match=r"steps.max_measure_s: a number of seconds > 0, got 'soon'"):
        load(write_suite(tmp_path / "word.yaml", f'name: w\nworkload: "{TINY}"\nsteps: {{max_measure_s: soon}}\n'))


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[1] / "suites").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_every_committed_suite_validates(path, tmp_path, monkeypatch):
    """As on a machine that has the programs its commands name (lerobot-train): a stand-in on PATH."""
    import os

    import yaml

    workload = yaml.safe_load(path.read_text()).get("workload")  # a name, a mapping, or in the tune block
    program = workload.get("params", {}).get("argv", ["{"])[0] if isinstance(workload, dict) else "{"
    if "{" not in program and os.sep not in program and shutil.which(program) is None:
        (tmp_path / program).write_text("#!/bin/sh\n")
        (tmp_path / program).chmod(0o755)
        monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    points = load(path).expand()
    assert points and any(not p.excluded for p in points)


# ---- bad input: each a problem naming the file and the key -----------------------------------------

SMALL = f"""
name: s
workload: {{name: "{TINY}", params: {{width: 8}}}}
steps: {{warmup: 1, measure: 2}}
"""


@pytest.mark.parametrize("override, key", [
    ("sweep.search={min: 1, max: 8, zero_retries: 'no'}", "sweep.search.zero_retries"),
    ("sweep.search={min: 1, max: 8, headroom_gib: -1}", "sweep.search.headroom_gib"),
    ("steps.steady=[true, 2]", "steps.steady"),
    ("knobs.mbs=100000000000000000000000000000000", "knobs.mbs"),
    ("knobs.seed=9223372036854775808", "knobs.seed"),
    ("workload.params.width=[1, 2]", "workload.params.width"),
    ("workload.params.width={cpu: [1, 2]}", "workload.params.width"),
    ("workload.params.step_s=.nan", "workload.params.step_s"),
    ("workload.params.step_s=.inf", "workload.params.step_s"),
    ("tune={space: {mbs: {min: 1, max: 1" + "0" * 400 + "}}}", "tune.space.mbs"),
    ("profile=[no-such-point]", "profile[0]"),  # it would profile nothing
])
def test_a_bad_value_is_a_problem_naming_its_key(tmp_path, override, key):
    with pytest.raises(SuiteError) as err:
        load(write_suite(tmp_path / "s.yaml", SMALL), [override])
    assert key in [p.key for p in err.value.problems] and str(tmp_path / "s.yaml") in str(err.value)


def test_a_huge_list_param_is_refused_quickly_and_named_by_its_length(tmp_path):
    with pytest.raises(SuiteError, match=r"workload.params.width: .*a list of 80000"):
        load(write_suite(tmp_path / "s.yaml", SMALL), ["workload.params.width=[" + "1," * 80_000 + "]"])


def test_an_alias_bomb_in_a_set_value_is_refused_before_it_expands(tmp_path):
    bomb = "[&a [x,x,x,x,x,x,x,x,x], &b [*a,*a,*a,*a,*a,*a,*a,*a,*a], &c [*b,*b,*b,*b,*b,*b,*b,*b,*b], " \
           "&d [*c,*c,*c,*c,*c,*c,*c,*c,*c], &e [*d,*d,*d,*d,*d,*d,*d,*d,*d], &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]]"
    with pytest.raises(SuiteError, match="aliases are expanded"):
        load(write_suite(tmp_path / "s.yaml", SMALL), [f"workload.params.width={bomb}"])


def test_an_integer_too_long_for_python_names_the_file_and_the_set_key(tmp_path):
    path = write_suite(tmp_path / "s.yaml", SMALL)
    with pytest.raises(SuiteError) as err:
        load(path, ["repeats=" + "9" * 5000])
    assert [p.key for p in err.value.problems] == ["--set repeats"]
    write_suite(path, SMALL + "repeats: " + "9" * 5000 + "\n")
    with pytest.raises(SuiteError) as err:
        load(path)
    assert err.value.problems[0].file == str(path)


@pytest.mark.parametrize("workload", [".rel:X", ":X", "no_such_module_xyz:X"])
def test_a_workload_reference_that_cannot_import_is_a_problem_naming_the_key(tmp_path, workload):
    with pytest.raises(SuiteError) as err:
        load(write_suite(tmp_path / "s.yaml", f"name: s\nworkload: '{workload}'\n"))
    assert [p.key for p in err.value.problems] == ["workload.name"]
    assert "expected 'module:Class'" in str(err.value)


def test_a_suite_path_through_a_file_is_a_missing_file(tmp_path):
    path = write_suite(tmp_path / "s.yaml", SMALL)
    with pytest.raises(SuiteError, match="does not exist"):
        load(path / "x.yaml")


@pytest.mark.parametrize("extra, key", [("gate: ['step_time:5']", "gate[0]"), ("description: [1]", "description")])
def test_a_bad_gate_threshold_or_description_is_refused_at_validation(tmp_path, extra, key):
    with pytest.raises(SuiteError) as err:
        load(write_suite(tmp_path / "s.yaml", SMALL + extra + "\n"))
    assert [p.key for p in err.value.problems] == [key]


def test_a_loss_tolerance_and_a_peak_that_are_no_numbers_name_their_flag_and_variable(monkeypatch):
    from benchbay.commands.judge import _loss_checks
    from benchbay.commands.resolve import peak_flops

    with pytest.raises(ValueError, match="--loss-equivalence 'a:b:x:1': RTOL and ATOL"):
        _loss_checks(None, ["a:b:x:1"])
    monkeypatch.setenv("BENCHBAY_PEAK_TFLOPS", "abc")
    with pytest.raises(ValueError, match="BENCHBAY_PEAK_TFLOPS='abc'"):
        peak_flops()
