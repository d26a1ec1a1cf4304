"""Workloads by name: the built-in ones, those of installed packages (entry point group
``benchbay.workloads``), and ``module:Class`` references to a user's own Workload subclass."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from benchbay.workloads.base import Workload

BUILTIN = {
    "dreamzero": "benchbay.workloads.dreamzero.workload:DreamZero",
    "wallx": "benchbay.workloads.wallx.workload:WallX",
    "decode": "benchbay.workloads.decode:Decode",
    "command": "benchbay.workloads.command:Command",
}
#: built-in workloads whose declaration (what a suite may set) is a class of its own, without the
#: model code and torch: suites are validated, listed and their results read from it
DECLARED = {
    "dreamzero": "benchbay.workloads.dreamzero.declared:DreamZeroDeclaration",
    "wallx": "benchbay.workloads.wallx.declared:WallXDeclaration",
    "decode": "benchbay.workloads.decode_declared:DecodeDeclaration",
    "command": "benchbay.workloads.command:Command",  # reads without torch: its own declaration
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
    return _load(name, target)


def declaration(name: str) -> type[Workload]:
    """What a suite may set for a workload (its knobs, params, regions): a built-in's declaration,
    read without its model code, else the class ``resolve`` gives."""
    builtin = name in DECLARED and available()[name] == BUILTIN[name]  # not a package's own of that name
    return _load(name, DECLARED[name]) if builtin else resolve(name)


def _load(name: str, target: str) -> type[Workload]:
    module_name, attr = target.split(":", 1)
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    # ValueError: ':X' (an empty module name); TypeError: '.rel:X' (a relative import, no package)
    except (ImportError, AttributeError, ValueError, TypeError) as exc:
        raise LookupError(f"workload {name!r}: cannot import {target} (expected 'module:Class'): {exc}") from exc
    if not (isinstance(obj, type) and issubclass(obj, Workload)):
        raise LookupError(f"workload {name!r}: {target} is not a benchbay Workload subclass")
    return obj
