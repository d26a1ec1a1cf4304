"""Which stored tune a ``--resume`` continues, and whether it is the study the suite describes now.
A manifest is untrusted: a field of the wrong type makes it not a tune to continue, said in one
line (``latest_tune`` passes over it), never an AttributeError."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from benchbay import store
from benchbay.suite.model import Suite
from benchbay.suite.tune import Tune

#: the manifest's list of the trials a Ctrl-C or a call's time limit stopped: their knobs, how long they ran
STOPPED = "stopped_trials"
#: a stopped trial starts again only in a call whose time budget is at least this many times what it ran
RESTART_FACTOR = 1.5


def stopped_trials(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The well-formed entries of the manifest's stopped trials (others are passed over)."""
    entries = manifest.get(STOPPED)
    return [e for e in entries if isinstance(e, dict) and isinstance(e.get("knobs"), dict)
            and isinstance(e.get("seconds"), (int, float)) and math.isfinite(e["seconds"])] \
        if isinstance(entries, list) else []


def too_long(stopped: list[dict[str, Any]], params: dict[str, Any], time_budget_s: float | None) -> str | None:
    """Why a configuration that an earlier call stopped unfinished is not started in this one: this
    call's time budget is under ``RESTART_FACTOR`` times what it ran there (a trial that ran out a
    whole call would run out every call, each time first in line)."""
    ran = max((e["seconds"] for e in stopped if e["knobs"] == params), default=None)
    if ran is None or time_budget_s is None or time_budget_s >= RESTART_FACTOR * ran:
        return None
    return (f"a call stopped it unfinished after {ran:.0f} s; this call's --time-budget of {time_budget_s:.0f} s "
            f"is under {RESTART_FACTOR:g} times that (give it a longer call, or a suite timeout that records it)")


def machine_of(manifest: dict[str, Any]) -> str | None:
    """The machine a stored run ran on, where its manifest says so."""
    env = manifest.get("env")
    key = env.get("machine_key") if isinstance(env, dict) else None
    return key if isinstance(key, str) else None


def latest_tune(root: Path, suite: str, machine_key: str) -> str:
    """The newest tune of ``suite`` under ``root`` that ran on this machine (its run id)."""
    for run in sorted((Path(root) / suite).glob("*/"), reverse=True):
        manifest = store.read_manifest(run)
        if isinstance(manifest.get("tune"), dict) and machine_of(manifest) == machine_key:
            return run.name
    raise FileNotFoundError(f"--resume: no tune of suite {suite!r} on this machine under {root}")


def same_study(manifest: dict[str, Any], run: Path, suite: Suite, tune: Tune, machine_key: str) -> None:
    """ValueError unless the stored run is this suite's study, over the same space, objective and
    fixed knobs, and on this machine."""
    where = f"--resume {run.name}"
    if manifest.get("suite") != suite.name or not isinstance(manifest.get("tune"), dict):
        raise ValueError(f"{where}: not a tune of suite {suite.name!r} (its manifest names "
                         f"{manifest.get('suite')!r}{'' if manifest.get('tune') else ', and no tune'})")
    machine = machine_of(manifest)
    if machine != machine_key:
        raise ValueError(f"{where}: the study ran on {machine}, this is {machine_key}: its trials say nothing of "
                         "this machine (resume it there, or start a tune here)")
    stored, now = manifest["tune"], tune.as_json()
    stored_suite = manifest.get("suite_as_run") or {}
    if not isinstance(stored_suite, dict):
        raise ValueError(f"{where}: its manifest's suite_as_run is a {type(stored_suite).__name__}, not a mapping: "
                         "not a study to continue (start a new tune instead)")
    for key in ("space", "objective", "constraints"):
        if stored.get(key) != now[key]:
            raise ValueError(f"{where}: its tune.{key} was {stored.get(key)!r}, the suite's is now {now[key]!r}: "
                             "a study continues over what it searched (start a new tune instead)")
    for key in ("workload", "knobs", "steps", "devices"):
        if stored_suite.get(key) != suite.raw.get(key):
            raise ValueError(f"{where}: the suite's {key} changed since the study began: its trials measured "
                             "another thing (start a new tune instead)")
