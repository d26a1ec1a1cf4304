"""A tune's ``tune.json`` read back as data (a stored file is untrusted: checked, never executed),
and its winner written as a suite anyone can ``run`` and ``gate``."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import yaml

from benchbay import store
from benchbay.record import PEAK_MEM_RESERVED_GIB

RESULT = "tune.json"
#: the top-level keys a reader relies on, and their JSON types
_SHAPE = {"trials": list, "confirmed": list, "pareto": list, "refused": list, "importances": dict,
          "memory_estimate": dict, "objective": dict, "device_seconds": (int, float)}


def read_result(run: Path) -> dict[str, Any] | None:
    """A run's tune result, or None (with a warning naming the file when it is not one)."""
    path = Path(run) / RESULT
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_bytes())
        problem = _problem(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        problem = f"not JSON ({exc})"
    if problem:
        warnings.warn(f"{path}: skipping a tune result that is not one: {problem}", stacklevel=2)
        return None
    return data


def _problem(data: Any) -> str | None:
    if not isinstance(data, dict):
        return "expected a JSON object"
    for key, kind in _SHAPE.items():
        if not isinstance(data.get(key), kind) or isinstance(data.get(key), bool):
            return f"{key}: expected {kind}"
    if not all(isinstance(t, dict) for key in ("trials", "confirmed", "pareto") for t in data[key]):
        return "trials, confirmed and pareto: expected lists of objects"
    best = data.get("best")
    if best is not None and not (isinstance(best, dict) and isinstance(best.get("knobs"), dict)):
        return "best: expected an object with knobs"
    if not math.isfinite(data["device_seconds"]):
        return "device_seconds: expected a finite number"
    return None


def emit_suite(run: Path, path: str | Path) -> Path:
    """The tune's winner as a suite of one point, ``tuned``: the tuned suite's workload, fixed knobs,
    steps, timeout and devices, its knobs those the tune found (written, then checked by loading it)."""
    from benchbay.suite import load

    result, manifest = read_result(run), store.read_manifest(run)
    raw = manifest.get("suite_as_run")
    if result is None or not result.get("best") or not isinstance(raw, dict):
        raise ValueError(f"{run}: no tune winner to emit (no tune.json with a best trial, or no suite in the manifest)")
    best = result["best"]
    name = f"{str(raw.get('name', 'suite')).removesuffix('-tune')}-tuned"  # wallx-tune -> wallx-tuned
    metric, value = (result.get("objective") or {}).get("metric"), best.get("objective")
    peak = (best.get("metrics") or {}).get(PEAK_MEM_RESERVED_GIB)
    figures = ", ".join(filter(None, [
        f"{metric} {value:.4g} (mean of {best.get('runs', 1)} processes)" if isinstance(value, (int, float)) else "",
        f"peak {peak:.1f} GiB reserved" if isinstance(peak, (int, float)) else ""]))
    suite = {"name": name,
             "description": f"The configuration `benchbay tune` found for {raw.get('name')} (run {run.name}, trial "
                            f"{best.get('trial')}, {'confirmed by repeats' if best.get('confirmed') else 'unconfirmed'}"
                            f"{'; ' + figures if figures else ''} on {result.get('gpu') or result.get('device')}).",
             **{k: raw[k] for k in ("workload", "steps", "timeout", "devices", "price_per_gpu_hour", "gate",
                                    "equivalent_tolerance") if k in raw},
             "knobs": {**(raw.get("knobs") or {}), **best["knobs"]},
             "sweep": {"points": [{"label": "tuned"}]},
             "repeats": max(int(raw.get("repeats", 1) or 1), 3)}  # a gate judges processes: a few of them
    path = Path(path)
    path.write_text(f"# written by `benchbay tune --emit-suite` from {run}\n"
                    + yaml.safe_dump(suite, sort_keys=False, width=110))
    load(path)  # what was written is a suite: it validates
    return path
