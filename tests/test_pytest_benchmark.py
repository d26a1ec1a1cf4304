"""pytest-benchmark bridge: a JSON written by pytest-benchmark itself is imported, gated, exported,
and the export is read back by the ``pytest-benchmark compare`` CLI."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from benchbay.analysis.compare import compare
from benchbay.analysis.frame import records_to_frame
from benchbay.analysis.gate import gate
from benchbay.pytest_benchmark import export_pytest_benchmark, import_pytest_benchmark
from benchbay.store import load_runs, read_manifest, read_records
from tests.fixtures.records import record as stored_record

TINY_BENCHMARKS = """
import pytest

def test_sum(benchmark):
    benchmark(sum, range(200))

@pytest.mark.parametrize("n", [10, 1000])
def test_sorted(benchmark, n):
    benchmark(sorted, list(range(n, 0, -1)))
"""


@pytest.fixture(scope="module")
def real_json(tmp_path_factory):
    """A JSON file written by pytest-benchmark 5.x (raw rounds kept by --benchmark-save-data)."""
    work = tmp_path_factory.mktemp("pb")
    (work / "test_tiny.py").write_text(TINY_BENCHMARKS)
    out = work / "out.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_tiny.py",
         f"--benchmark-json={out}", "--benchmark-save-data", "--benchmark-min-rounds=30",
         "--benchmark-max-time=0.00001", "--benchmark-disable-gc"],
        cwd=work, capture_output=True, text=True, timeout=120,
        # under pytest-xdist: pytest-benchmark turns itself off in a process that looks like an xdist worker
        env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def scaled_copy(source, target, factor, *, steady=False):
    """The same benchmarks, every time multiplied by ``factor`` (a deterministic slowdown); with
    ``steady`` the rounds are first replaced by ones spread 1% around each benchmark's median (real
    rounds of a microsecond on a shared machine can hold outliers that swamp a doubled mean)."""
    doc = json.loads(source.read_text())
    for bench in doc["benchmarks"]:
        stats = bench["stats"]
        if steady:
            stats["data"] = [stats["median"] * (1 + 0.01 * ((i % 5) - 2) / 2) for i in range(len(stats["data"]))]
        stats["data"] = [x * factor for x in stats["data"]]
        for key in ("min", "max", "mean", "stddev", "median", "iqr", "q1", "q3", "ld15iqr", "hd15iqr", "total"):
            stats[key] *= factor
        stats["ops"] /= factor
    target.write_text(json.dumps(doc))
    return target


def pytest_benchmark_compare(*files, cwd):
    return subprocess.run([sys.executable, "-m", "pytest_benchmark", "compare", *map(str, files)],
                          cwd=cwd, capture_output=True, text=True, timeout=120)


def test_import_keeps_every_benchmark_and_its_raw_rounds(real_json, tmp_path):
    doc = json.loads(real_json.read_text())
    run = import_pytest_benchmark(real_json, tmp_path / "results", suite="tiny")
    assert run.parent == tmp_path / "results" / "tiny"
    records = read_records(run)
    assert [r["label"] for r in records] == [b["name"] for b in doc["benchmarks"]]
    for record, bench in zip(records, doc["benchmarks"], strict=True):
        assert record["series"]["step_times_s"] == bench["stats"]["data"]
        assert record["metrics"]["step_time_s"] == bench["stats"]["median"]
        assert record["metrics"]["measured_steps"] == bench["stats"]["rounds"] == len(bench["stats"]["data"])
        assert record["knobs"] == (bench["params"] or {})
        assert record["status"] == "ok"
        assert record["extra"]["pytest_benchmark"]["fullname"] == bench["fullname"]
    assert records[0]["env"]["machine_key"].startswith("Linux-CPython-3.")
    manifest = read_manifest(run)
    assert manifest["source"]["machine_info"] == doc["machine_info"]
    assert manifest["points"] == len(records)
    with pytest.raises(FileExistsError, match="imported before"):
        import_pytest_benchmark(real_json, tmp_path / "results", suite="tiny")


def _imports(real_json, tmp_path, results, factor):
    """Three imports of the real file's layout with steady rounds, ``factor`` x its times, 1% apart
    from one import to the next: pytest-benchmark runs all rounds in one process, so an import is
    one process and a verdict needs several (the spread between processes)."""
    steady = scaled_copy(real_json, tmp_path / "steady.json", 1.0, steady=True)
    return load_runs([import_pytest_benchmark(scaled_copy(steady, tmp_path / f"x{factor}-{i}.json", factor * s),
                                              results, suite="tiny") for i, s in enumerate((0.99, 1.0, 1.01))])


def test_gate_on_imported_runs(real_json, tmp_path):
    results = tmp_path / "results"
    base = _imports(real_json, tmp_path, results, 1.0)
    slow = _imports(real_json, tmp_path, results, 2.0)
    same = gate(base, base)
    assert same.exit_code == 0 and len(same.checks) == 3
    slower = gate(base, slow)
    assert slower.exit_code == 1 and set(slower.checks["verdict"]) == {"slower"}
    assert (slower.checks["ratio"] - 2.0).abs().max() < 1e-6
    only_big = gate(base, slow, ["n=10/step_time:median:5%"])
    assert list(only_big.checks["point"]) == ["test_sorted[10]"] and only_big.exit_code == 1
    table = compare(base, slow, metrics=["step_time", "samples_per_s"])
    assert set(table["verdict"]) == {"slower"}
    # one import a side: one process each, nothing to size the noise between processes with
    first = [side[side["run_id"] == side["run_id"].iloc[0]] for side in (base, slow)]
    one = gate(*first)
    assert one.exit_code == 0 and set(one.checks["verdict"]) == {"cannot support a verdict"}


def test_export_round_trips_and_pytest_benchmark_compare_reads_it(real_json, tmp_path):
    run = import_pytest_benchmark(real_json, tmp_path / "results", suite="tiny")
    (tmp_path / "export").mkdir()  # the export creates no folder (a typo must not)
    out = export_pytest_benchmark(run, tmp_path / "export" / "0001_benchbay.json")
    original, exported = json.loads(real_json.read_text()), json.loads(out.read_text())
    assert exported["machine_info"] == original["machine_info"]
    for mine, theirs in zip(exported["benchmarks"], original["benchmarks"], strict=True):
        for key in ("name", "fullname", "params", "param", "group"):
            assert mine[key] == theirs[key]
        assert mine["stats"]["data"] == theirs["stats"]["data"]
        for key in ("min", "max", "mean", "median", "rounds", "iterations"):
            assert mine["stats"][key] == pytest.approx(theirs["stats"][key])
    done = pytest_benchmark_compare(out, real_json, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Failed to load" not in done.stdout + done.stderr
    for bench in original["benchmarks"]:
        assert done.stdout.count(bench["name"]) == 2  # one row per file


def test_export_of_a_benchbay_run_is_read_by_pytest_benchmark(tmp_path):
    rng = np.random.default_rng(0)
    records = [stored_record(
        suite="toy", run_id="r1", point_id=f"p{mbs}", repeat=repeat, knobs={"mbs": mbs, "compile": "off"},
        metrics={"step_time_s": 0.1 * mbs, "warmup_steps": 2, "measured_steps": 10, "mfu": 0.3,
                 "peak_mem_allocated_gib": 3.0 * mbs},
        series={"step_times_s": list(0.1 * mbs * (1 + rng.normal(0, 0.01, 12)))},
        env={"gpu": "NVIDIA H200", "torch": "2.11.0", "python": "3.12.3", "git_commit": "abc"},
        started_at="2026-11-29T16:15:00+00:00",
    ) for mbs in (1, 2) for repeat in range(2)] + [
        stored_record(suite="toy", run_id="r1", point_id="p4", knobs={"mbs": 4, "compile": "off"}, status="oom")]
    out = export_pytest_benchmark(records_to_frame(records), tmp_path / "toy.json")
    doc = json.loads(out.read_text())
    assert [b["name"] for b in doc["benchmarks"]] == ["mbs=1", "mbs=2"]  # the oom point is left out
    first = doc["benchmarks"][0]
    assert first["stats"]["rounds"] == 20  # 2 repeats x 10 steady steps, warm-up dropped
    assert first["extra_info"]["peak_mem_allocated_gib"] == 3.0
    assert doc["machine_info"]["benchbay"]["gpu"] == "NVIDIA H200"
    done = pytest_benchmark_compare(out, cwd=tmp_path)
    assert done.returncode == 0 and "mbs=2" in done.stdout, done.stdout + done.stderr


def test_import_without_raw_data_warns_and_still_gates(real_json, tmp_path):
    doc = json.loads(real_json.read_text())
    for bench in doc["benchmarks"]:
        del bench["stats"]["data"]
    stripped = tmp_path / "summary_only.json"
    stripped.write_text(json.dumps(doc))
    with pytest.warns(UserWarning, match="--benchmark-save-data"):
        run = import_pytest_benchmark(stripped, tmp_path / "results", suite="tiny")
    df = load_runs([run])
    result = gate(df, df)
    assert result.exit_code == 0
    # no rounds and one process: no noise estimate, so no interval and no verdict (never a failure)
    assert result.checks["ci_low"].isna().all() and set(result.checks["verdict"]) == {"cannot support a verdict"}


def test_not_a_pytest_benchmark_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match="not a pytest-benchmark JSON"):
        import_pytest_benchmark(bad, tmp_path / "results")


def test_an_import_with_a_malformed_benchmark_is_refused_whole_and_can_be_made_again(real_json, tmp_path):
    doc = json.loads(real_json.read_text())
    assert len(doc["benchmarks"]) >= 2
    doc["benchmarks"][1]["stats"]["data"] = ["not a number"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    results = tmp_path / "results"
    with pytest.raises(ValueError, match=r"bad\.json: benchmarks\[1\]: not a benchmark benchbay can read"):
        import_pytest_benchmark(bad, results, run_id="r1")
    assert not any(results.rglob("records.jsonl")) and not list(results.glob(".import-*"))
    run = import_pytest_benchmark(real_json, results, run_id="r1")  # the same id: nothing was left behind
    assert len(read_records(run)) == len(doc["benchmarks"]) and read_manifest(run)["state"] == "complete"
    assert not list(results.glob(".import-*"))
