"""Stored baselines: a run copied aside, per machine, for the gate to compare against.

Layout: ``<results_root>/baselines/<machine-key>/<name>/{records.jsonl,manifest.json}``. The
machine key (``env.machine_key`` of the run's records: GPU model and count, CUDA, torch) keeps a
baseline from an H100 or another torch from ever gating an H200 run. Saving under an existing
name replaces that baseline as a whole. :func:`earlier_runs` gives the gate the machine's other
runs of the suite: what they say of the spread between processes stands in where a run has too
few repeats to say it.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from benchbay.store import (
    BASELINES_DIR,
    MANIFEST,
    RECORDS,
    SAFE_NAME,
    find_runs,
    load_runs,
    read_manifest,
    read_records,
    record_lines,
    refuse_links,
    write_json,
)

if TYPE_CHECKING:
    import pandas as pd


def _read_records(run_dir: Path) -> list[dict]:
    if not (run_dir / RECORDS).is_file():
        raise FileNotFoundError(f"{run_dir} holds no {RECORDS}: not a benchbay run directory")
    return read_records(run_dir)


def run_machine_key(run_dir: str | Path) -> str:
    """The single ``env.machine_key`` of a run's records (ValueError if none or several)."""
    keys = {(r.get("env") or {}).get("machine_key") for r in _read_records(Path(run_dir))} - {None}
    if len(keys) != 1:
        raise ValueError(f"{run_dir}: expected one env.machine_key across its records, found {sorted(keys) or 'none'}")
    return keys.pop()


def run_suites(run_dir: str | Path) -> set[str]:
    return {r.get("suite") for r in _read_records(Path(run_dir))} - {None}


def _record_lines(run: Path) -> bytes:
    """A run's lines that are records, as stored; each other line said in a warning and left out.
    ValueError for a run without a record."""
    path = run / RECORDS
    lines = path.read_bytes().split(b"\n") if path.is_file() else []
    good = []
    for n, got in record_lines(path) if lines else []:
        if isinstance(got, str):
            warnings.warn(f"{path}:{n}: {got}: left out of the baseline", stacklevel=3)
        else:
            good.append(lines[n - 1] + b"\n")
    if not good:
        raise ValueError(f"{path}: holds no records: nothing to save as a baseline")
    return b"".join(good)


def _check_readable(baseline: Path) -> None:
    """A baseline that exists but cannot be read is an error, never "no baseline": a gate that
    found garbage (or nothing) there and passed would be turned off by it."""
    path = baseline / RECORDS
    lines = list(record_lines(path))
    if not lines:
        raise ValueError(f"{path}: holds no records: an unreadable baseline")
    for n, got in lines:
        if isinstance(got, str):
            raise ValueError(f"{path}:{n}: {got}: an unreadable baseline")


def check_baseline(baseline: Path, machine_key: str) -> Path:
    """``baseline``, once it meets the rule of every baseline the gate is given, found by name or
    named as a folder: each of its lines a record, and its records of the candidate's machine key
    (another machine's figures, a 3x slower CPU's, judge nothing of this one); ValueError otherwise."""
    _check_readable(baseline)
    key = run_machine_key(baseline)
    if key != machine_key:
        raise ValueError(f"{baseline}: a baseline of machine {key}, but the candidate ran on {machine_key}: a gate "
                         "compares one machine's runs (`benchbay compare` shows the two side by side)")
    return baseline


def _check_name(name: str, what: str = "baseline name") -> None:
    """One path component: a baseline's name, and its machine key, which comes from the records
    (a record saying ``"machine_key": "../../x"`` must not place a baseline outside the root)."""
    # a leading dot is the staging folders' (skipped by readers): such a baseline was saved, never found
    if not isinstance(name, str) or not SAFE_NAME.fullmatch(name):
        raise ValueError(f"invalid {what} {name!r}: one path component of letters, digits, '.', '_' and '-', "
                         "starting with a letter or digit, such as 'main'")


def save_baseline(run_dirs: str | Path | list[str | Path], name: str, results_root: str | Path = "results", *,
                  machine_key: str | None = None) -> Path:
    """Store the records of one run, or of several runs of one machine (a suite measured in parts),
    and the first run's manifest under ``<results_root>/baselines/<machine-key>/<name>/``.

    The machine key comes from the records unless given. The copy is written beside the target
    and renamed into place, so a reader never sees a half-written baseline. Returns the directory.
    """
    _check_name(name)
    runs = [Path(r) for r in (run_dirs if isinstance(run_dirs, list) else [run_dirs])]
    keys = {machine_key or run_machine_key(run) for run in runs}
    if len(keys) != 1:
        raise ValueError(f"runs of several machines cannot make one baseline: {sorted(keys)}")
    key = keys.pop()
    _check_name(key, "machine key")
    # the gate reads a baseline whole: only the runs' records go in, a torn line (a hard kill) left out
    records = b"".join(_record_lines(run) for run in runs)
    manifest = _stored_manifest(runs[0])
    target = refuse_links(Path(results_root) / BASELINES_DIR / key / name, results_root)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    (staging / RECORDS).write_bytes(records)
    if manifest:
        write_json(staging, MANIFEST, manifest)
    if target.exists():
        retired = Path(tempfile.mkdtemp(prefix=f".{name}-old-", dir=target.parent))
        target.rename(retired / name)
        staging.rename(target)
        shutil.rmtree(retired)
    else:
        staging.rename(target)
    return target


def _stored_manifest(run: Path) -> dict:
    """A run's manifest as parsed (never a copy of a link's target: the link could name any file)."""
    if (run / MANIFEST).is_symlink():
        raise ValueError(f"{run / MANIFEST}: a symbolic link; a baseline copies no file through a link")
    return read_manifest(run)


def list_baselines(results_root: str | Path = "results", machine_key: str | None = None) -> list[Path]:
    """Baseline directories (every machine, or one), newest first."""
    root = Path(results_root) / BASELINES_DIR
    pattern = f"{machine_key}/*/{RECORDS}" if machine_key else f"*/*/{RECORDS}"
    found = [p.parent for p in root.glob(pattern) if not p.parent.name.startswith(".")]
    return sorted(found, key=lambda d: (d / RECORDS).stat().st_mtime, reverse=True)


def find_baseline(results_root: str | Path, machine_key: str, *, name: str | None = None,
                  suite: str | None = None) -> Path | None:
    """The baseline for this machine key: the one called ``name``, else the newest holding ``suite``
    (any suite when None). None when there is none: the caller should say so, not fail silently."""
    _check_name(machine_key, "machine key")
    if name is not None:
        _check_name(name)
        candidate = Path(results_root) / BASELINES_DIR / machine_key / name
        found = candidate if (candidate / RECORDS).is_file() else None
        if found is not None:
            _check_readable(found)
        return found if found is None or suite is None or suite in run_suites(found) else None
    for directory in list_baselines(results_root, machine_key):
        _check_readable(directory)
        if suite is None or suite in run_suites(directory):
            return directory
    return None


def stored_runs(results_root: str | Path, suite: str | None) -> pd.DataFrame | None:
    """Every stored run of ``suite`` under ``results_root``, any machine, as one frame (None: none)."""
    # a stored suite name is untrusted: 5 or '../elsewhere' must not pick a folder to read
    if not isinstance(suite, str) or not SAFE_NAME.fullmatch(suite) or suite == BASELINES_DIR \
            or not (Path(results_root) / suite).is_dir():
        return None
    try:
        frame = load_runs(find_runs([Path(results_root) / suite]))
    except FileNotFoundError:  # a suite folder without a run yet
        return None
    return frame if len(frame) else None


def earlier_runs(results_root: str | Path, suite: str | None, machine_key: str) -> pd.DataFrame | None:
    """The stored runs of ``suite`` measured on ``machine_key`` (None when there is none): the
    machine's own record of how far its processes spread."""
    frame = stored_runs(results_root, suite)
    if frame is None or "env.machine_key" not in frame:
        return None
    frame = frame[frame["env.machine_key"] == machine_key]
    return frame if len(frame) else None
