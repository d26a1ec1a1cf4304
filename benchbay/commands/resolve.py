"""What the commands' arguments name, resolved: the suite file, a run, the baseline a run is gated
against, the suites and tunes the runs hold, the peak FLOP/s and the GPU-hour price."""

from __future__ import annotations

import math
import os
from pathlib import Path

#: the MFU denominator (TFLOP/s) for every point, e.g. for fp32 points or a device benchbay does not list
PEAK_ENV_VAR = "BENCHBAY_PEAK_TFLOPS"


def peak_flops() -> float | None:
    """The peak FLOP/s forced by ``BENCHBAY_PEAK_TFLOPS``, else None (each device's own)."""
    tflops = os.environ.get(PEAK_ENV_VAR)
    if not tflops:
        return None
    try:
        value = float(tflops)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{PEAK_ENV_VAR}={tflops!r}: a peak in TFLOP/s, a finite number > 0")
    return value * 1e12


def gpu_hour_price(args, runs) -> float | dict[str, float]:
    """The GPU-hour price for the cost columns: ``--price-per-gpu-hour``, else each suite's own."""
    from benchbay.analysis.cost import prices

    return prices(suite_metas(runs), args.price_per_gpu_hour)


def load_suite(args):
    from benchbay.suite import load

    return load(args.suite, args.set)


def tune_results(runs) -> dict:
    """Each tune run's ``tune.json``, read as data (benchbay.tune.result)."""
    from benchbay.tune.result import read_result

    return {run.name: result for run in runs if (result := read_result(run)) is not None}


def one_run(ref: str, results: str) -> Path:
    """A single run: the newest (``newest_first``) when ``ref`` names a suite folder or suite."""
    from benchbay.store import find_runs, newest_first

    return newest_first(find_runs([ref], results))[0]


def suite_metas(runs) -> dict:
    """What analysis reads of each suite the runs ran, from their manifests (never importing a
    workload they name: ``SuiteMeta``)."""
    from benchbay.store import MANIFEST, SAFE_NAME, read_manifest
    from benchbay.suite.model import SuiteMeta

    metas = {}
    for run in runs:
        manifest, source = read_manifest(run), str(Path(run) / MANIFEST)
        if manifest.get("suite_as_run"):
            suite = manifest.get("suite")
            if not isinstance(suite, str) or not SAFE_NAME.fullmatch(suite):  # it names report folders
                raise ValueError(f"{source}: suite: expected a suite name (letters, digits, '.', '_' and '-'), "
                                 f"not {suite!r}")
            metas[suite] = SuiteMeta.from_raw(manifest["suite_as_run"], source)
    return metas


def gate_baseline(run: Path, name: str | None, results: str) -> Path | None:
    """The baseline a run is gated against: ``name`` as a folder, else by name on the run's machine;
    either meets ``check_baseline`` (readable, of the run's machine)."""
    from benchbay.baselines import check_baseline, find_baseline, run_machine_key
    from benchbay.store import read_manifest

    suite, key = read_manifest(run).get("suite"), run_machine_key(run)
    found = Path(name) if name and Path(name).is_dir() else find_baseline(results, key, name=name or suite, suite=suite)
    return None if found is None else check_baseline(found, key)
