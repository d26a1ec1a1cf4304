"""Suite files: YAML read (YAML 1.2 booleans, aliases bounded), ``--set`` overrides applied, then
checked into a typed Suite (benchbay.suite.check; the types are benchbay.suite.model)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from benchbay.store import SAFE_NAME
from benchbay.suite.check import from_dict
from benchbay.suite.model import (
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
           "excluded_by", "for_device", "from_dict", "load", "name_of", "parse_scalar", "read"]


class _Loader(yaml.SafeLoader):
    """YAML 1.2 booleans: only true/false, so ``compile: off`` stays the string 'off'; a key given
    twice in one mapping is an error (the last one silently won), a key a merge (``<<: *a``) brings
    may be given again (that is what a merge is for)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = self.construct_scalar(key_node)
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"the key {key!r} appears twice in one "
                                                            "mapping", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep)


_Loader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:bool"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                              list("tTfF"))


#: the largest expanded suite document, in YAML nodes: nested aliases expand exponentially (a
#: 564-byte suite of them wrote a 1.8 GB manifest), while the largest real suite has a few hundred
MAX_NODES = 100_000
#: bounds checked before a document is composed, which PyYAML does recursively and all in memory:
#: a 1 KB suite nested 500 deep raised RecursionError, a 40 MB one was still parsing at 6.8 GB
MAX_BYTES, MAX_DEPTH = 1 << 20, 32


class _TooLarge(yaml.YAMLError):
    """A document over the bounds: said as it is, not as invalid YAML."""


def parse_scalar(text: str) -> Any:
    """A command-line value as YAML reads it (``4`` -> 4, ``[1,2]`` -> list, ``off`` -> 'off')."""
    return _bounded_load(text)


def _bounded_load(text: str) -> Any:
    """YAML text as data, once its events (PyYAML's parser keeps a stack of its own, so it never
    recurses) show it at most ``MAX_DEPTH`` collections deep and ``MAX_NODES`` values long."""
    depth = values = 0
    for event in yaml.parse(text, Loader=_Loader):
        depth += isinstance(event, yaml.CollectionStartEvent) - isinstance(event, yaml.CollectionEndEvent)
        values += isinstance(event, yaml.NodeEvent)
        if depth > MAX_DEPTH or values > MAX_NODES:
            raise _TooLarge(f"at most {MAX_DEPTH} levels of nesting and {MAX_NODES} values")
    return yaml.load(text, Loader=_Loader)


def load(path: str | Path, overrides: list[str] | tuple[str, ...] = (), *, runnable: bool = True) -> Suite:
    """Read, override (``key.path=value``) and validate a suite file; raises SuiteError. ``runnable=False``:
    read, not to be run here (a command's program need not be on PATH)."""
    raw = read(path)
    for item in overrides:
        _apply_override(raw, item, str(path))
    if overrides:  # a --set value's aliases expand as a file's do
        _bounded_size(raw, str(path))
    return from_dict(raw, str(path), runnable=runnable)


def name_of(path: str | Path) -> str:
    """A suite file's name, read as data: what a reading command (``history``) needs of it, without
    validating the suite, which imports the workload it names (reading never runs a suite's code)."""
    name = read(path).get("name")
    if not isinstance(name, str) or not SAFE_NAME.fullmatch(name):
        raise SuiteError([Problem(str(path), "name", f"one path component of letters, digits, '.', '_' and '-', "
                                  f"got {name!r}")])
    return name


def read(path: str | Path) -> dict[str, Any]:
    """A suite file's mapping, bounded before and after it is parsed; raises SuiteError."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_BYTES:
            raise _TooLarge(f"at most {MAX_BYTES} bytes")
        raw = _bounded_load(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):  # s/ok.yaml/x.yaml: a file where a folder was named
        raise SuiteError([Problem(str(path), "<file>", "the file does not exist")]) from None
    except PermissionError as exc:
        raise SuiteError([Problem(str(path), "<file>", f"a file benchbay may read ({exc.strerror})")]) from None
    except _TooLarge as exc:
        raise SuiteError([Problem(str(path), "<file>", str(exc))]) from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        # one line naming the file and the line (YAML's own message names "<unicode string>")
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "<file>"
        raise SuiteError([Problem(str(path), where, f"valid YAML ({getattr(exc, 'problem', None) or exc})")]) from None
    except ValueError as exc:  # a value YAML parses but Python refuses: an integer of over 4300 digits
        raise SuiteError([Problem(str(path), "<file>", f"valid values ({exc})")]) from None
    if not isinstance(raw, dict):
        raise SuiteError([Problem(str(path), "<top level>", "a mapping of suite keys")])
    return _bounded_size(raw, str(path))


def _bounded_size(raw: dict[str, Any], file: str) -> dict[str, Any]:
    if _larger_than(raw, MAX_NODES):
        raise SuiteError([Problem(file, "<file>", f"at most {MAX_NODES} values once its aliases are "
                                  "expanded (nested aliases expand exponentially)")])
    return raw


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
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: an integer of over 4300 digits
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
