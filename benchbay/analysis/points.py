"""Points across result sets: the columns that identify a point (suite, workload, ``param.*``, the
knobs), two frames' points matched on them, how their environments differ, and a short name for each."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import pandas as pd

from benchbay.analysis.frame import as_json, is_missing, knob_columns, param_columns
from benchbay.record import FIGURES, Record

#: environment fields that make two measurements incomparable when they differ
ENV_KEYS = ("gpu", "driver", "cuda", "torch")

#: columns that are not knobs, to find knob columns in a frame without ``knob_names``: the record's
#: fields, and the metrics and series that a flat frame spreads beside the knobs
_RECORD_FIELDS = frozenset({f.name for f in fields(Record)} | FIGURES)
_NON_KNOB_PREFIXES = ("env.", "extra.", "health.", "param.", "metrics.", "series.", "rank")


def _canonical(value: Any) -> str:
    """One spelling per value, so that 32, 32.0 and "32" from different loaders match."""
    if is_missing(value):
        return "null"
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(as_json(value))


def point_key_columns(df: pd.DataFrame) -> list[str]:
    """Columns that identify a point: suite, workload, ``param.*`` and the knobs.

    The knobs are those the rows name in ``knob_names`` (``records_to_frame`` keeps them); for a
    frame built another way, every column that is not a record field nor prefixed ``env.``,
    ``extra.``, ``param.``, nor holds lists (a series).
    """
    if "knob_names" in df:
        knobs = knob_columns(df)
    else:
        knobs = [c for c in df.columns if c not in _RECORD_FIELDS and not c.startswith(_NON_KNOB_PREFIXES)
                 and not df[c].map(lambda v: isinstance(v, (list, tuple))).any()]  # a series (a command's own)
    fixed = [c for c in ("suite", "workload", "world_size") if c in df.columns]
    return fixed + sorted(param_columns(df)) + sorted(knobs)


def first_label(rows: pd.DataFrame) -> str | None:
    labels = rows["label"].dropna() if "label" in rows else ()
    return str(labels.iloc[0]) if len(labels) else None


@dataclass
class MatchedPoint:
    """The rows of one point on each side (all repeats, any status); either side may be empty."""

    key: dict[str, str]
    baseline: pd.DataFrame
    candidate: pd.DataFrame

    @property
    def label(self) -> str | None:
        return first_label(self.candidate) or first_label(self.baseline)

    @property
    def rows(self) -> pd.DataFrame:
        return pd.concat([self.baseline, self.candidate])


def point_groups(df: pd.DataFrame, key_columns: Sequence[str]) -> dict[tuple[str, ...], list[int]]:
    """Row positions of each point (all its repeats and runs), keyed by canonical key values."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for pos, values in enumerate(df[list(key_columns)].itertuples(index=False, name=None)):
        groups.setdefault(tuple(_canonical(v) for v in values), []).append(pos)
    return groups


def match_points(
    baseline: pd.DataFrame, candidate: pd.DataFrame, key_columns: Sequence[str] | None = None,
    ignore_knobs: Sequence[str] = (),
) -> list[MatchedPoint]:
    """Pair the points of two frames on their shared key columns (baseline order, then new points);
    ``ignore_knobs`` do not take part, so a deliberate change of them (compile on -> off) is compared."""
    if key_columns is None:
        shared = set(point_key_columns(baseline)) & set(point_key_columns(candidate))
        key_columns = [c for c in point_key_columns(baseline) if c in shared and c not in ignore_knobs]
    keys = list(key_columns)
    if not keys:
        raise ValueError("the frames share no point columns (suite, workload, param.*, knobs) to match on")
    base_groups, cand_groups = point_groups(baseline, keys), point_groups(candidate, keys)
    order = list(base_groups) + [k for k in cand_groups if k not in base_groups]
    return [
        MatchedPoint(
            key=dict(zip(keys, key, strict=True)),
            baseline=baseline.iloc[base_groups.get(key, [])],
            candidate=candidate.iloc[cand_groups.get(key, [])],
        )
        for key in order
    ]


def env_differences(baseline: pd.DataFrame, candidate: pd.DataFrame, keys: Iterable[str] = ENV_KEYS) -> list[str]:
    """Human-readable differences in the environment fields, e.g. ``torch 2.11.0 vs 2.12.0``."""

    def values(rows: pd.DataFrame, column: str) -> str:
        found = sorted({_canonical(v) for v in rows[column]} - {"null"}) if column in rows else []
        return "/".join(found) or "unknown"

    out = []
    for key in keys:
        base, cand = values(baseline, f"env.{key}"), values(candidate, f"env.{key}")
        if base != cand:
            out.append(f"{key} {base} vs {cand}")
    return out


def describe_points(keys: Sequence[Mapping[str, str]], labels: Sequence[str | None]) -> list[str]:
    """A short name per point: its label, else the key values that vary across the points."""
    varying = [k for k in (keys[0] if keys else {}) if k != "suite" and len({key[k] for key in keys}) > 1]
    names = []
    for key, label in zip(keys, labels, strict=True):
        described = ", ".join(f"{k.removeprefix('param.')}={key[k]}" for k in varying)
        names.append(label or described or key.get("suite", "point"))
    return names
