"""Suite files: YAML read (YAML 1.2 booleans, aliases bounded), ``--set`` overrides applied, then
checked into a typed Suite (benchbay.suite_check; the types are benchbay.suite_model)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from benchbay.suite_check import from_dict
from benchbay.suite_model import (
    MIN_BUDGETED_STEPS,
    Devices,
    Point,
    Problem,
    Search,
    Steps,
    Suite,
    SuiteError,
    excluded_by,
    for_device,
)

__all__ = ["MIN_BUDGETED_STEPS", "Devices", "Point", "Problem", "Search", "Steps", "Suite", "SuiteError",
           "excluded_by", "for_device", "from_dict", "load", "parse_scalar"]


class _Loader(yaml.SafeLoader):
    """YAML 1.2 booleans: only true/false, so ``compile: off`` stays the string 'off'."""


_Loader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:bool"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                              list("tTfF"))


#: the largest expanded suite document, in YAML nodes: nested aliases expand exponentially (a
#: 564-byte suite of them wrote a 1.8 GB manifest), while the largest real suite has a few hundred
MAX_NODES = 100_000


def parse_scalar(text: str) -> Any:
    """A command-line value as YAML reads it (``4`` -> 4, ``[1,2]`` -> list, ``off`` -> 'off')."""
    return yaml.load(text, Loader=_Loader)


def load(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Suite:
    """Read, override (``key.path=value``) and validate a suite file; raises SuiteError."""
    path = Path(path)
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)
    except FileNotFoundError:
        raise SuiteError([Problem(str(path), "<file>", "the file does not exist")]) from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        # one line naming the file and the line (YAML's own message names "<unicode string>")
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "<file>"
        raise SuiteError([Problem(str(path), where, f"valid YAML ({getattr(exc, 'problem', None) or exc})")]) from None
    if not isinstance(raw, dict):
        raise SuiteError([Problem(str(path), "<top level>", "a mapping of suite keys")])
    if _larger_than(raw, MAX_NODES):
        raise SuiteError([Problem(str(path), "<file>", f"at most {MAX_NODES} values once its aliases are "
                                  "expanded (nested aliases expand exponentially)")])
    for item in overrides:
        _apply_override(raw, item, str(path))
    return from_dict(raw, str(path))


def _apply_override(raw: dict[str, Any], item: str, file: str) -> None:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise SuiteError([Problem(file, f"--set {item}", "key.path=value")])
    node = raw
    *parents, last = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise SuiteError([Problem(file, f"--set {key}", f"{part!r} to be a mapping")])
    try:
        node[last] = parse_scalar(value)
    except yaml.YAMLError as exc:
        why = getattr(exc, "problem", None) or exc
        raise SuiteError([Problem(file, f"--set {key}", f"a YAML value, got {value!r} ({why})")]) from None


def _larger_than(raw: Any, limit: int) -> bool:
    """Whether the document, its aliases expanded, has more than ``limit`` values. The walk stops
    at the limit, so an alias bomb (or an alias cycle) costs no more than a document of that size."""
    stack, seen = [raw], 0
    while stack:
        seen += 1
        if seen > limit:
            return True
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False
