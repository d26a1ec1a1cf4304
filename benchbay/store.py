"""The append-only results store: ``results/<suite>/<run-id>/records.jsonl`` (one JSON line per
point and repeat, each appended with flush + fsync) beside ``manifest.json`` (the suite as run,
the environment, the run's state). Loading any set of runs gives one flat DataFrame."""

from __future__ import annotations

import datetime as dt
import difflib
import errno
import fcntl
import functools
import hashlib
import json
import math
import os
import re
import secrets
import sys
import time
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchbay.record import Record, finite, validate

if TYPE_CHECKING:  # a frame only where results are read: the worker and the suite files never pay for pandas
    import pandas as pd

# A run's folder, as the store lays it out (every writer and reader goes through these names):
#   records.jsonl   one record per point and repeat, appended (schema: benchbay.record)
#   manifest.json   what ran where (suite, machine, state), replaced whole; schema MANIFEST_SCHEMA
#   profiles/<point_id>-<repeat>/   a profiled point's traces (benchbay.collect.profile)
#   memory/         memory snapshots and their log (the suite's ``profile.memory_snapshot``)
#   tune.json       a tune's study (benchbay.tune.result)
RECORDS = "records.jsonl"
MANIFEST = "manifest.json"
PROFILES, MEMORY, STOPPED = "profiles", "memory", "stopped"
#: the manifest's layout version, stamped on each one written (none: written before versions, the same keys)
MANIFEST_SCHEMA = 1
#: the results root's folder of baselines (``<root>/baselines/<machine-key>/<name>/``): no suite's name
BASELINES_DIR = "baselines"
#: the errors of a store that cannot be written (a full disk, a quota, a read-only mount), not of bad input
UNWRITABLE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})


def point_id(workload: str, params: dict[str, Any], knobs: dict[str, Any], world_size: int = 1) -> str:
    """Stable identity of a measurement: the same workload, params, knobs and number of processes
    give the same id (so resume, compare and reports never pool different world sizes)."""
    blob = json.dumps({"workload": workload, "params": params, "knobs": knobs, "world_size": world_size},
                      sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)


#: a suite's name and a run id are one path component each: nothing a suite or a record says may
#: write outside the results root (``/tmp/x``, ``..`` and ``""`` did)
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def run_dir(root: str | Path, suite: str, run_id: str) -> Path:
    for what, value in (("suite name", suite), ("run id", run_id)):
        if not isinstance(value, str) or not SAFE_NAME.fullmatch(value):
            raise ValueError(f"{what} {value!r}: expected one path component of letters, digits, '.', '_' "
                             "and '-', starting with a letter or digit")
    if suite == BASELINES_DIR:  # that folder holds the baselines' machine folders, not a suite's runs
        raise ValueError(f"suite name {suite!r}: reserved for the baselines' folder; name the suite otherwise")
    return Path(root) / suite / run_id


class RunInUse(FileExistsError):
    """Another process holds a run's lock: it is running or resuming that run (the CLI says so in
    one line, as of any FileExistsError)."""


@contextmanager
def lock_run(run: Path) -> Iterator[None]:
    """An exclusive lock on a run while it is written, held on its records file (the one file of a
    run that is only appended to, never replaced, so the lock is never lost to a rename); RunInUse,
    naming the holder, when another process has it."""
    with _open_records(run) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = read_manifest(run).get("pid")
            raise RunInUse(f"{run} is in use by another benchbay process ({f'pid {pid}' if pid else 'starting'}): "
                           "wait for it to end, or stop it, then resume") from None
        yield


def append_record(run: Path, record: Record) -> None:
    """One line of strict JSON, fsynced, whole or absent: a write that fails (a full disk) is cut
    back off the file before its error goes on, and a crash or Ctrl-C loses nothing already appended."""
    line = (json.dumps(record.to_json(), default=str, allow_nan=False) + "\n").encode()
    with _open_records(run) as f:
        end = f.seek(0, os.SEEK_END)
        if end > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":  # a torn line from a hard kill: keep the new record off it
                line = b"\n" + line
        try:
            written = 0
            while written < len(line):
                written += os.write(f.fileno(), line[written:])
            os.fsync(f.fileno())
        except OSError:
            f.truncate(end)
            raise


def append_log(path: Path, root: Path, entry: dict[str, Any]) -> None:
    """One JSON line appended to a log of a run's (its memory snapshots'), never through a link."""
    path = refuse_links(path, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o666), "a") as f:
        f.write(json.dumps(entry, default=str) + "\n")


def log_entries(path: Path) -> list[dict[str, Any]]:
    """A run's log's entries; a line that is not a JSON object (torn by a kill or a full disk) is passed over."""
    out = []
    for line in path.read_text(errors="replace").splitlines() if path.is_file() else []:
        with suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict):
                out.append(entry)
    return out


def write_manifest(run: Path, manifest: dict[str, Any]) -> None:
    write_json(run, MANIFEST, {**manifest, "schema": MANIFEST_SCHEMA})


def profile_dir(run: Path, point_id: str, repeat: int) -> Path:
    """Where a profiled point's traces go."""
    return Path(run) / PROFILES / f"{point_id}-{repeat}"


def stopped_log(run: Path, name: str) -> Path:
    """Where the end of the log of a point stopped by a Ctrl-C or a call's time limit goes
    (``name``: its point id and repeat, or warm-up)."""
    return Path(run) / STOPPED / f"{name}.log"


def memory_dir(run: Path) -> Path:
    """Where a run's memory snapshots and their log go."""
    return Path(run) / MEMORY


def write_json(run: Path, name: str, data: dict[str, Any]) -> None:
    """A run's JSON file (its manifest, a tune's ``tune.json``) replaced whole: a crash or a full
    disk leaves the old one."""
    text = json.dumps(finite(data), indent=2, default=str, allow_nan=False)
    write_atomic(run / name, text.encode(), root=Path(run).parent.parent)


def refuse_links(path: str | Path, root: str | Path) -> Path:
    """``path``, once neither it nor a folder between ``root`` and it is a symbolic link: benchbay
    writes nothing through a link (git keeps links, so a pull request can plant one under results/
    or reports/ that points anywhere the user can write). ``root`` itself may be one (a results
    root on another disk); ValueError naming the link otherwise."""
    path, current = Path(path), Path(root)
    for part in path.relative_to(root).parts:
        current = current / part
        if current.is_symlink():
            raise ValueError(f"{current}: a symbolic link; benchbay writes nothing through a link (remove it, "
                             "or write elsewhere)")
    return path


def write_atomic(path: str | Path, data: bytes, root: str | Path | None = None) -> Path:
    """``data`` as the file ``path``, whole or not at all: written to a temporary file of a fresh
    name beside it (created exclusively, so never through a planted link), then renamed over it; a
    write that fails (a full disk) leaves the old file and no temporary one. No link from ``root``
    (default: the file's folder) down to the file (``refuse_links``)."""
    path = Path(path)
    refuse_links(path, path.parent if root is None else root)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    try:
        with open(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _open_records(run: Path):
    """A run's records file, opened to append (and read its last byte), created when absent; never
    through a link, neither the file nor its suite's or run's folder."""
    path = refuse_links(run / RECORDS, Path(run).parent.parent)
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o666), "ab+", buffering=0)


def read_manifest(run: Path) -> dict[str, Any]:
    """A run's manifest, or {} (with a warning naming it when it cannot be read: one bad manifest
    must not hide the other runs of a suite)."""
    path = Path(run) / MANIFEST
    if not path.exists():
        return {}
    try:
        manifest = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        warnings.warn(f"{path}: skipping a manifest that is not JSON ({exc})", stacklevel=2)
        return {}
    if not isinstance(manifest, dict):
        warnings.warn(f"{path}: skipping a manifest that is not a JSON object", stacklevel=2)
        return {}
    schema = manifest.get("schema", 0)
    if not isinstance(schema, int) or isinstance(schema, bool) or not 0 <= schema <= MANIFEST_SCHEMA:
        warnings.warn(f"{path}: skipping a manifest of schema {schema!r}; this benchbay reads schemas 0 to "
                      f"{MANIFEST_SCHEMA} (a newer benchbay wrote it?)", stacklevel=2)
        return {}
    return manifest


def record_lines(path: Path) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """Each non-blank line of a records file: its number and the record, migrated to today's
    schema (``benchbay.record.validate``), or what keeps it from being one."""
    for n, raw in enumerate(path.read_bytes().split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            yield n, validate(json.loads(raw.decode("utf-8")))
        except UnicodeDecodeError as exc:
            yield n, f"a line that is not UTF-8 text ({exc.reason} at byte {exc.start})"
        except json.JSONDecodeError as exc:
            yield n, f"an incomplete record (not JSON: {exc.msg})"
        except ValueError as exc:
            yield n, f"a line that is not a record ({exc})"


def read_records(run: Path) -> list[dict[str, Any]]:
    """Every record of a run (the JSON of ``Record``, older schemas migrated); a line that is not
    one (a torn last line from a hard kill, a hand edit, a bad byte) is skipped with a warning
    naming its file and line."""
    path = Path(run) / RECORDS
    if not path.exists():
        return []
    records = []
    for n, got in record_lines(path):
        if isinstance(got, str):
            warnings.warn(f"{path}:{n}: skipping {got}", stacklevel=2)
        else:
            records.append(got)
    return records


def typed_records(run: Path) -> list[Record]:
    """Every record of a run as ``Record`` (``read_records``: its JSON, all fields kept)."""
    return [Record.from_valid(r) for r in read_records(run)]


def find_runs(paths: Iterable[str | Path], root: str | Path = "results") -> list[Path]:
    """Run folders named by the arguments: a run folder, a records.jsonl, a suite folder (all its
    runs), a suite name or a run id under ``root``."""
    runs: list[Path] = []
    for item in paths:
        path = Path(item)
        if path.name == RECORDS:
            path = path.parent
        if not path.exists() and (Path(root) / item).exists():
            path = Path(root) / item
        if not path.exists():
            matches = sorted(Path(root).glob(f"*/{item}"))
            if not matches:
                raise FileNotFoundError(f"no run, suite folder or records file called {item!r} (looked under {root})"
                                        + _did_you_mean(str(item), root))
            if len(matches) > 1:  # a pattern ('*'): picking one of them silently showed an arbitrary run
                named = ", ".join(str(m.relative_to(root)) for m in matches[:5]) + (", ..." if len(matches) > 5 else "")
                raise ValueError(f"{item!r} matches {len(matches)} runs under {root} ({named}): name one run, or a "
                                 "suite for all its runs")
            path = matches[0]
        if (path / RECORDS).exists():
            runs.append(path)
        else:
            found = sorted(p.parent for p in path.glob(f"*/{RECORDS}"))
            if not found:
                raise FileNotFoundError(f"{path}: holds no {RECORDS}")
            runs.extend(found)
    return runs


def _did_you_mean(name: str, root: str | Path) -> str:
    """The suites and run ids under ``root`` closest to a mistyped ``name``, as a hint."""
    known = [p.name for p in Path(root).glob("*") if p.is_dir()] + [p.name for p in Path(root).glob("*/*/")]
    close = difflib.get_close_matches(name, known, n=3)
    return f"; did you mean {' or '.join(close)}?" if close else ""


def latest_run(root: str | Path, suite: str, machine_key: str | None = None) -> Path | None:
    """The newest run of a suite (on this machine key, when given), by ``newest_first``."""
    for run in newest_first((Path(root) / suite).glob("*/")):
        if not (run / MANIFEST).exists():
            continue
        if machine_key is None or (read_manifest(run).get("env") or {}).get("machine_key") == machine_key:
            return run
    return None


def newest_first(runs: Iterable[Path]) -> list[Path]:
    """Runs by when they started (their manifests' ``started_at``), the newest first, not by their
    names: a run id is a folder name anyone can pick (a copy named ``20991231-...`` would stand
    for the newest run forever). A start in the future (an import of a file dated 9999-12-31) or
    none counts as the oldest; runs that started together go by name."""
    return sorted(runs, key=lambda run: (_started(run), run.name), reverse=True)


def _started(run: Path) -> float:
    """When a run started (a POSIX time), or -inf where its manifest does not say, or says a time to come."""
    try:
        started = dt.datetime.fromisoformat(read_manifest(run).get("started_at"))
    except (TypeError, ValueError):
        return -math.inf
    started = started if started.tzinfo else started.replace(tzinfo=dt.timezone.utc)
    return started.timestamp() if started <= dt.datetime.now(dt.timezone.utc) else -math.inf


@functools.cache
def _knob_defaults(workload: str) -> dict[str, Any] | None:
    """Today's knob defaults of a workload (once per name: a run's records share a few), None for
    one that is neither registered nor already imported. Reading results never imports what a
    record names: a ``module:Class`` of a results file would run that module's code."""
    from benchbay import knobs as knob_table
    from benchbay.workloads import registry

    if workload not in registry.available():
        module, _, attr = workload.partition(":")
        cls = getattr(sys.modules.get(module), attr, None) if attr else None  # the suite being run
        return knob_table.defaults_for(cls) if isinstance(cls, type) and issubclass(cls, registry.Workload) else None
    try:
        return knob_table.defaults_for(registry.declaration(workload))
    except LookupError:
        return None


def as_measured_today(record: dict[str, Any]) -> dict[str, Any]:
    """A stored record under today's knob table: a knob added since it was measured takes its
    default (the behaviour it had before), and its point id follows. A record of a workload that
    no longer imports (a user's own), or without knobs (an import): as stored."""
    if "knobs" not in record or "workload" not in record:
        return record
    defaults = _knob_defaults(record["workload"])
    if defaults is None:
        return record
    knobs = {**defaults, **record["knobs"]}
    return {**record, "knobs": knobs,
            "point_id": point_id(record["workload"], record.get("params", {}), knobs, record.get("world_size", 1))}


def today_point_id(record: Record) -> str:
    """A record's point id under today's knob table (``as_measured_today``)."""
    return as_measured_today(record.to_json())["point_id"]


def load_runs(paths: Iterable[str | Path], root: str | Path = "results") -> pd.DataFrame:
    """All records of the named runs as one flat DataFrame (see benchbay.analysis.frame), each
    under today's knob table (``as_measured_today``: a configuration's identity is its knobs completed
    with today's defaults, the runner's rule) and with its run's ``run_state`` (complete, interrupted,
    running): a report of an interrupted run must say that its search or sweep is unfinished. A point a run measured
    twice on one machine (a resume that did not know it) is shown by its first record, the one
    the runner keeps, unless that one failed and a later one is its retry (``--retry-failed``)."""
    from benchbay.analysis.frame import records_to_frame

    stored = [{**r, "run_state": read_manifest(run).get("state")} for run in find_runs(paths, root)
              for r in read_records(run)]
    kept: dict[tuple, dict[str, Any]] = {}
    for r in stored:
        # every record: a knob that none of the records has (added since) still names the configuration
        r = as_measured_today(r)
        key = (r.get("run_id"), r.get("point_id"), r.get("repeat"), (r.get("env") or {}).get("machine_key"))
        keep(kept, key, r)
    return records_to_frame(list(kept.values()))


def keep(kept: dict[Any, Any], key: Any, record: Record | dict[str, Any]) -> None:
    """The record that stands for a point measured more than once in a run: the first, or the
    retry of a first that failed (a ``Record``, or its JSON: a frame's rows keep every field)."""
    held = kept.get(key)
    if held is None or (held if isinstance(held, Record) else Record.from_json(held)).failed:
        kept[key] = record


def writable_file(path: str | Path, what: str) -> Path:
    """A file benchbay is asked to write (``--export``, ``--markdown``): its folder must exist
    already; a typo must not create folders anywhere the user can write."""
    path = Path(path)
    if path.is_symlink():  # a planted link would aim the write at any file the user can write
        raise ValueError(f"{what} {path}: a symbolic link; benchbay writes nothing through a link")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"{what} {path}: no folder {path.parent} (create it first)")
    if path.is_dir():
        raise IsADirectoryError(f"{what} {path}: a folder, not a file")
    return path


def export(df: pd.DataFrame, path: str | Path) -> Path:
    """Parquet or CSV by the file's suffix (list columns are kept in Parquet, JSON text in CSV)."""
    path = writable_file(path, "--export")
    if path.suffix == ".parquet":
        data = df.to_parquet()
    elif path.suffix == ".csv":
        flat = df.copy()
        for col in flat.columns:
            if flat[col].map(lambda v: isinstance(v, (list, dict))).any():
                flat[col] = flat[col].map(lambda v: json.dumps(v) if isinstance(v, (list, dict)) else v)
        data = flat.to_csv(index=False).encode()
    else:
        raise ValueError(f"{path}: export as .parquet or .csv")
    return write_atomic(path, data)  # whole or not at all, and never through a link
