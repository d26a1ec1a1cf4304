"""Workloads by name: the built-in ones, those of installed packages (entry point group
``benchbay.workloads``), and ``module:Class`` references to a user's own Workload subclass."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from benchbay.workloads.base import Workload

BUILTIN = {
    "dreamzero": "benchbay.workloads.dreamzero:DreamZero",
    "wallx": "benchbay.workloads.wallx:WallX",
    "decode": "benchbay.workloads.decode:Decode",
}

ENTRY_POINT_GROUP = "benchbay.workloads"


def available() -> dict[str, str]:
    """Name -> ``module:attr`` of every registered workload."""
    found = dict(BUILTIN)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found[ep.name] = ep.value
    return found


def resolve(name: str) -> type[Workload]:
    """The workload class for a registered name or a ``module:Class`` reference; raises
    LookupError saying what is known when nothing matches."""
    target = available().get(name, name)
    if ":" not in target:
        raise LookupError(f"unknown workload {name!r}; registered: {sorted(available())}, "
                          "or give 'module:Class' for your own")
    module_name, attr = target.split(":", 1)
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise LookupError(f"workload {name!r}: cannot import {target}: {exc}") from exc
    if not (isinstance(obj, type) and issubclass(obj, Workload)):
        raise LookupError(f"workload {name!r}: {target} is not a benchbay Workload subclass")
    return obj
