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
    # the optional parts the report reads, where present: each of its type
    for where, value, kind in (("budget", data.get("budget"), dict), ("no_feasible", data.get("no_feasible"), dict),
                               ("best.ties", (best or {}).get("ties"), list),
                               ("best.metrics", (best or {}).get("metrics"), dict),
                               ("memory_estimate.predictions", data["memory_estimate"].get("predictions"), list),
                               ("no_feasible.closest", _get(data.get("no_feasible"), "closest"), list)):
        if value is not None and not isinstance(value, kind):
            return f"{where}: expected {kind.__name__}"
    return None


def _get(node: Any, key: str) -> Any:
    return node.get(key) if isinstance(node, dict) else None


def emit_suite(run: Path, path: str | Path, suite_raw: dict[str, Any] | None = None) -> Path:
    """The tune's winner as a suite of one point, ``tuned``, named after ``path``: the tuned suite's
    workload, fixed knobs, steps, timeout and devices, its knobs those the tune found; checked before
    it is written (a failed check writes nothing), then written whole.

    ``suite_raw``: the tuned suite as read from the user's own file (``benchbay tune``). Without it
    the suite is the one the run's manifest stored, which is untrusted: its workload must then be a
    registered name, since checking a ``module:Class`` would import the module a results file names."""
    from benchbay.suite import SuiteError, from_dict, parse_scalar

    result, manifest = read_result(run), store.read_manifest(run)
    raw = manifest.get("suite_as_run") if suite_raw is None else suite_raw
    if result is None or not result.get("best") or not isinstance(raw, dict):
        raise ValueError(f"{run}: no tune winner to emit (no tune.json with a best trial, or no suite in the manifest)")
    if suite_raw is None:
        _registered_workload(run, raw)
    fixed = raw.get("knobs") or {}
    if not isinstance(fixed, dict):
        raise ValueError(f"{run}: its suite's knobs are {type(fixed).__name__}, not a mapping: no suite to emit")
    best = result["best"]
    path = Path(path)
    # named after its file, as every suite is (a second card's winner beside the first's: wallx-tuned-h100.yaml);
    # a file whose name is no suite name: after the tuned suite, wallx-tune -> wallx-tuned
    name = path.stem if store.SAFE_NAME.fullmatch(path.stem) else \
        f"{str(raw.get('name', 'suite')).removesuffix('-tune')}-tuned"
    metric, value = (result.get("objective") or {}).get("metric"), best.get("objective")
    peak = (best.get("metrics") or {}).get(PEAK_MEM_RESERVED_GIB)
    figures = ", ".join(filter(None, [
        f"{metric} {value:.4g} (mean of {best.get('runs', 1)} processes)" if isinstance(value, (int, float)) else "",
        f"peak {peak:.1f} GiB reserved" if isinstance(peak, (int, float)) else ""]))
    repeats = raw.get("repeats")
    suite = {"name": name,
             "description": f"The configuration `benchbay tune` found for {raw.get('name')} (run {run.name}, trial "
                            f"{best.get('trial')}, {'confirmed by repeats' if best.get('confirmed') else 'unconfirmed'}"
                            f"{'; ' + figures if figures else ''} on {result.get('gpu') or result.get('device')}).",
             **{k: raw[k] for k in ("workload", "steps", "timeout", "devices", "price_per_gpu_hour", "gate",
                                    "equivalent_tolerance") if k in raw},
             "knobs": {**fixed, **best["knobs"]},
             "sweep": {"points": [{"label": "tuned"}]},
             # a gate judges processes: a few of them
             "repeats": max(repeats if isinstance(repeats, int) and not isinstance(repeats, bool) else 1, 3)}
    # the run's path escaped: a line break in a folder's name would start a key of its own
    text = (f"# written by `benchbay tune --emit-suite` from {ascii(str(run))[1:-1]}\n"
            + yaml.safe_dump(suite, sort_keys=False, width=110))
    try:  # the text as it will be read back, checked before anything is written
        from_dict(parse_scalar(text), str(path))
    except (SuiteError, yaml.YAMLError) as exc:
        problems = getattr(exc, "problems", None) or [exc]
        raise ValueError(f"--emit-suite {path}: the winner's suite does not check, nothing written: "
                         + "; ".join(str(p).replace("\n", " ") for p in problems)) from None
    return store.write_atomic(path, text.encode())


def _registered_workload(run: Path, raw: dict[str, Any]) -> None:
    """A stored suite's workload, when it is a registered name (a built-in or an installed
    package's); ValueError otherwise."""
    from benchbay.workloads.registry import available

    node = raw.get("workload")
    name = node.get("name") if isinstance(node, dict) else node
    if isinstance(name, str) and name in available():
        return
    raise ValueError(f"--emit-suite: {run} ran the workload {repr(name)[:120]}, not a registered one: benchbay "
                     "never imports code a stored run names, so its suite is emitted only by the tune itself "
                     f"(`benchbay tune SUITE --resume {run.name} --emit-suite F`, which reads your suite file)")
