"""Bridge to pytest-benchmark: import its JSON as a benchbay run, export a run as its JSON.

Import (``pytest --benchmark-json=out.json --benchmark-save-data``, or a file saved with
``--benchmark-autosave``): every benchmark becomes one point (label = its name, knobs = its
``params``, ``param.fullname`` = its test id). Its raw per-round times (``stats.data``, kept only
with ``--benchmark-save-data``) become ``series.step_times_s``, so compare and gate can judge their
noise; without them only the summary figures exist and a comparison has no noise estimate (a
warning says so). Median, mean, p10/p90 and CV map onto benchbay's step-time metrics; every
pytest-benchmark figure is kept under ``extra.pytest_benchmark``; ``machine_info`` and
``commit_info`` fill the environment (``env.machine_key`` is pytest-benchmark's own machine id,
e.g. ``Linux-CPython-3.11-64bit``) and are kept whole in the manifest.

Export: one benchmark per ok point (repeats pooled), stats recomputed by pytest-benchmark's own
``Stats`` from the steady step times, so ``pytest-benchmark compare`` reads the file like its own.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import platform
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pytest_benchmark import __version__ as pytest_benchmark_version
from pytest_benchmark.stats import Stats

from benchbay import store
from benchbay.analysis.compare import steady_step_times
from benchbay.analysis.frame import records_to_frame
from benchbay.analysis.points import describe_points, first_label, point_groups, point_key_columns
from benchbay.record import (
    COMPILE_TIME_S,
    FIRST_STEP_S,
    LOSSES,
    MEASURED_STEPS,
    MFU,
    PEAK_MEM_ALLOCATED_GIB,
    PEAK_MEM_RESERVED_GIB,
    SAMPLES_PER_S,
    SAMPLES_PER_S_PER_GPU,
    SAMPLES_PER_STEP,
    STEP_TIME_CV,
    STEP_TIME_MEAN_S,
    STEP_TIME_P10_S,
    STEP_TIME_P90_S,
    STEP_TIME_S,
    STEP_TIMES_S,
    WARMUP_STEPS,
    Record,
    Status,
)

WORKLOAD = "pytest-benchmark"
# benchbay metrics worth carrying into an export's extra_info
_EXTRA_INFO_METRICS = (SAMPLES_PER_S, SAMPLES_PER_S_PER_GPU, MFU, PEAK_MEM_ALLOCATED_GIB,
                       PEAK_MEM_RESERVED_GIB, FIRST_STEP_S, COMPILE_TIME_S)


def _machine_key(machine_info: dict[str, Any]) -> str:
    """pytest-benchmark's machine id: system-implementation-python major.minor-bits."""
    version = ".".join(str(machine_info.get("python_version", "")).split(".")[:2])
    bits = (machine_info.get("cpu") or {}).get("bits", 64)
    return f"{machine_info.get('system')}-{machine_info.get('python_implementation')}-{version}-{bits}bit"


def _env(machine_info: dict[str, Any], commit_info: dict[str, Any]) -> dict[str, Any]:
    cpu = machine_info.get("cpu") or {}
    commit = commit_info.get("id")
    if commit in (None, "unversioned"):
        commit = None
    elif commit_info.get("dirty"):
        commit += "-dirty"
    return {
        "machine_key": _machine_key(machine_info),
        "gpu": None, "gpu_count": 0, "driver": None, "cuda": None, "torch": None,
        "python": machine_info.get("python_version"),
        "cpu": cpu.get("brand_raw") or machine_info.get("processor"),
        "cpu_count": cpu.get("count"),
        "git_commit": commit,
        "hostname_hash": hashlib.sha1(str(machine_info.get("node", "")).encode()).hexdigest()[:10],
        "packages": {},
    }


#: the figures of a benchmark's stats that its record is made of
_STATS = ("median", "mean", "stddev", "rounds")


def _check_benchmark(bench: Any, where: str) -> None:
    if not isinstance(bench, dict) or not isinstance(bench.get("name"), str):
        raise ValueError(f"{where}: expected a benchmark with a name")
    stats = bench.get("stats")
    if not isinstance(stats, dict):
        raise ValueError(f"{where} ({bench['name']}): no 'stats' mapping (a pytest-benchmark JSON file has one "
                         "per benchmark)")
    missing = [k for k in _STATS if not isinstance(stats.get(k), (int, float)) or isinstance(stats.get(k), bool)]
    if missing:
        raise ValueError(f"{where} ({bench['name']}): stats lack the numbers {', '.join(missing)}")


def _record(bench: dict[str, Any], suite: str, run_id: str, env: dict[str, Any], started_at: str) -> Record:
    stats = dict(bench["stats"])
    data = [float(x) for x in stats.pop("data", None) or []]
    params = {"fullname": bench.get("fullname") or bench["name"]}
    knobs = dict(bench.get("params") or {})
    median, mean = stats["median"], stats["mean"]
    p10, p90 = np.percentile(data, [10, 90]) if data else (None, None)
    metrics = {
        STEP_TIME_S: median, STEP_TIME_MEAN_S: mean,
        STEP_TIME_P10_S: None if p10 is None else float(p10),
        STEP_TIME_P90_S: None if p90 is None else float(p90),
        STEP_TIME_CV: stats["stddev"] / mean if mean else None,
        FIRST_STEP_S: data[0] if data else None, WARMUP_STEPS: 0, MEASURED_STEPS: stats["rounds"],
        SAMPLES_PER_STEP: 1, SAMPLES_PER_S: 1.0 / median if median else None,
    }
    kept = {key: bench.get(key) for key in ("name", "fullname", "group", "param", "params", "options", "extra_info")}
    return Record(
        suite=suite, run_id=run_id, point_id=store.point_id(WORKLOAD, params, knobs), label=bench["name"],
        workload=WORKLOAD, params=params, knobs=knobs, status=Status.OK, metrics=metrics,
        series={STEP_TIMES_S: data, LOSSES: []},
        extra={"pytest_benchmark": {**kept, "iterations": stats.get("iterations", 1), "stats": stats}},
        env=env, started_at=started_at, duration_s=stats.get("total"),
    )


def import_pytest_benchmark(json_path: str | Path, results_root: str | Path = "results", *,
                            suite: str = "pytest-benchmark", run_id: str | None = None) -> Path:
    """Write ``<results_root>/<suite>/<run-id>/records.jsonl`` + ``manifest.json`` from a
    pytest-benchmark JSON file; returns the run directory.

    The run id defaults to the file's timestamp plus a hash of its content, so importing the same
    file twice raises FileExistsError instead of doubling the records.
    """
    json_path = Path(json_path)
    if not json_path.is_file():
        raise FileNotFoundError(f"{json_path}: no such file")
    raw = json_path.read_bytes()
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{json_path}: not a JSON file ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise ValueError(f"{json_path}: not a pytest-benchmark JSON file (no 'benchmarks' list)")
    for i, bench in enumerate(doc["benchmarks"]):  # all checked before anything is written
        _check_benchmark(bench, f"{json_path}: benchmarks[{i}]")
    started_at = doc.get("datetime") or dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    try:
        stamp = dt.datetime.fromisoformat(started_at).strftime("%Y%m%d-%H%M%S")
    except (TypeError, ValueError):
        raise ValueError(f"{json_path}: key 'datetime': expected an ISO 8601 time, got {started_at!r}") from None
    run_id = run_id or f"{stamp}-{hashlib.sha1(raw).hexdigest()[:4]}"
    run = store.run_dir(results_root, suite, run_id)
    if run.exists():
        raise FileExistsError(f"{run} already exists: this file was imported before")
    machine_info, commit_info = doc.get("machine_info") or {}, doc.get("commit_info") or {}
    env = _env(machine_info, commit_info)
    records = []
    for i, bench in enumerate(doc["benchmarks"]):  # every record made before anything is written
        try:
            records.append(_record(bench, suite, run_id, env, started_at))
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise ValueError(f"{json_path}: benchmarks[{i}]: not a benchmark benchbay can read ({exc})") from None
    without_data = [b["name"] for b in doc["benchmarks"] if not b["stats"].get("data")]
    if without_data:
        warnings.warn(f"{json_path}: {len(without_data)} benchmarks carry no raw data (e.g. {without_data[0]}); "
                      "rerun with --benchmark-save-data so comparisons can estimate noise", stacklevel=2)
    # written beside the run, then renamed into place: an import is whole or absent, never a run
    # that says complete with half its records (a re-import would then be refused as done)
    run.parent.mkdir(parents=True, exist_ok=True)
    holder = Path(tempfile.mkdtemp(prefix=".import-", dir=run.parent.parent))  # no reader looks in it
    staging = holder / "suite" / run_id
    store.write_manifest(staging, {
        "suite": suite, "run_id": run_id, "env": env, "started_at": started_at, "points": len(records),
        "state": "complete",
        "source": {"kind": WORKLOAD, "path": str(json_path), "version": doc.get("version"),
                   "machine_info": machine_info, "commit_info": commit_info, "datetime": doc.get("datetime")},
    })
    try:
        for record in records:
            store.append_record(staging, record)
        os.replace(staging, store.refuse_links(run, run.parent.parent))
    finally:
        shutil.rmtree(holder, ignore_errors=True)
    return run


def _machine_info(row: pd.Series) -> dict[str, Any]:
    """A pytest-benchmark machine_info from a record's environment (GPU fields under ``benchbay``)."""
    return {
        "node": row.get("env.hostname_hash"), "processor": row.get("env.cpu") or "", "machine": platform.machine(),
        "python_implementation": "CPython", "python_version": row.get("env.python"), "system": platform.system(),
        "cpu": {"brand_raw": row.get("env.cpu"), "count": row.get("env.cpu_count")},
        "benchbay": {k: row.get(f"env.{k}") for k in ("machine_key", "gpu", "gpu_count", "driver", "cuda", "torch")},
    }


def _json_safe(value: Any) -> Any:
    """Frame cells to plain JSON: NaN -> None, numpy scalars -> Python."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def _benchmark(rows: pd.DataFrame, name: str) -> dict[str, Any]:
    first = rows.iloc[0]
    data = np.concatenate([steady_step_times(r) for _, r in rows.iterrows()])
    if not data.size:  # summary-only record: its median stands for the one round
        data = rows[STEP_TIME_S].dropna().to_numpy(dtype=float)
    stats = Stats()
    for value in data:
        stats.update(float(value))
    kept = first.get("extra.pytest_benchmark")
    kept = kept if isinstance(kept, dict) else {}
    names = first.get("knob_names")
    knobs = {k: first.get(k) for k in names} if isinstance(names, (list, tuple, np.ndarray)) else {}
    extra_info = {m: first.get(m) for m in _EXTRA_INFO_METRICS if m in first}
    extra_info.update(point_id=first.get("point_id"), run_id=first.get("run_id"), repeats=len(rows))
    warmup = first.get(WARMUP_STEPS)
    return _json_safe({
        "group": kept.get("group", first.get("suite")),
        "name": kept.get("name", name),
        "fullname": kept.get("fullname", f"{first.get('suite')}::{name}"),
        "params": kept.get("params", knobs or None),
        "param": kept.get("param", first.get("point_id")),
        "extra_info": kept.get("extra_info") or extra_info,
        "options": kept.get("options") or {"timer": "benchbay", "warmup": warmup, "min_rounds": int(data.size)},
        "stats": {**stats.as_dict(), "data": list(stats.data), "iterations": kept.get("iterations", 1)},
    })


def export_pytest_benchmark(source: pd.DataFrame | str | Path, out_path: str | Path) -> Path:
    """Write a pytest-benchmark JSON file (readable by ``pytest-benchmark compare``) from a results
    frame or a run directory; returns the path. Only ok points are exported."""
    manifest: dict[str, Any] = {}
    if isinstance(source, pd.DataFrame):
        df = source
    else:
        manifest = store.read_manifest(Path(source))
        df = records_to_frame(store.read_records(Path(source)))
    ok = df[df["status"] == Status.OK] if "status" in df else df
    if ok.empty:
        raise ValueError("no ok points to export")
    keys = point_key_columns(ok)
    groups = point_groups(ok, keys)
    labels = [first_label(ok.iloc[pos]) for pos in groups.values()]
    names = describe_points([dict(zip(keys, k, strict=True)) for k in groups], labels)
    benchmarks = [_benchmark(ok.iloc[pos], name) for pos, name in zip(groups.values(), names, strict=True)]
    first = ok.iloc[0]
    source_info = manifest.get("source") or {}
    commit = first.get("env.git_commit")
    doc = {
        "machine_info": source_info.get("machine_info") or _json_safe(_machine_info(first)),
        "commit_info": source_info.get("commit_info") or {
            "id": commit, "time": None, "author_time": None, "dirty": str(commit or "").endswith("-dirty"),
            "project": first.get("suite"), "branch": None,
        },
        "benchmarks": benchmarks,
        "datetime": str(ok["started_at"].min()) if "started_at" in ok else None,
        "version": pytest_benchmark_version,
    }
    out_path = store.writable_file(out_path, "export-pytest-benchmark")  # an existing folder, no link
    return store.write_atomic(out_path, json.dumps(doc, indent=2, default=str).encode())
