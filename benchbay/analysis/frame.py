"""Results records (nested JSON, one per point and repeat) flattened into one DataFrame row each.

Layout: top-level scalars as columns (``suite``, ``run_id``, ``point_id``, ``label``, ``repeat``,
``status``...), every knob under its plain name (``mbs``, ``compile``...), params as
``param.<name>``, metrics under their plain names (``step_time_s``...), env as ``env.<key>``,
extra as ``extra.<key>``, the runner's machine checks as ``health.<key>``, series as list columns
(``step_times_s``, ``losses``, ``cpu_util``, ``cpu_util_t``). ``knob_names`` holds each row's knob
names, so analysis can tell knob columns from metric columns without a list of every metric.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

#: record sections spread into prefixed (or plain) columns instead of kept as one value
_SECTIONS = {"knobs": "", "params": "param.", "metrics": "", "series": "", "env": "env.", "extra": "extra.",
             "health": "health."}


def flatten_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """One results record as one flat row (see the module docstring for the layout)."""
    row = {key: value for key, value in record.items() if key not in _SECTIONS}
    for section, prefix in _SECTIONS.items():
        for key, value in (record.get(section) or {}).items():
            row[prefix + key] = value
    row["knob_names"] = tuple(record.get("knobs") or ())
    return row


def records_to_frame(records: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """A DataFrame of flattened records, in the order given."""
    return rows_to_frame([flatten_record(r) for r in records])


def rows_to_frame(rows: list[Mapping[str, Any]]) -> pd.DataFrame:
    """A DataFrame of flat rows whose knob and param columns keep their values as written
    (object dtype, None where a row lacks them): a frame mixing suites would otherwise turn
    ``mbs`` 1 into 1.0 beside a suite without that knob."""
    df = pd.DataFrame(rows)
    for column in knob_columns(df) + param_columns(df):
        df[column] = pd.Series([row.get(column) for row in rows], index=df.index, dtype=object)
    return df


def knob_columns(df: pd.DataFrame) -> list[str]:
    """Knob columns present in ``df``, in first-seen order."""
    names: dict[str, None] = {}
    for row_names in df.get("knob_names", pd.Series(dtype=object)).dropna():
        names.update(dict.fromkeys(row_names))
    return [n for n in names if n in df.columns]


def is_missing(value: Any) -> bool:
    """None, NaN or pandas' NA (not an empty list: a series may be empty and still recorded)."""
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def param_columns(df: pd.DataFrame) -> list[str]:
    return [c for c in df.columns if c.startswith("param.")]


def varying_columns(df: pd.DataFrame, columns: Iterable[str]) -> list[str]:
    """Those of ``columns`` that take more than one value in ``df`` (missing counts as a value)."""
    return [c for c in columns if c in df.columns and df[c].astype(str).nunique(dropna=False) > 1]


def as_json(value: Any) -> Any:
    """A list, tuple or mapping (a command's argv, its env) as its JSON text, keys sorted: hashable,
    and one spelling per value; anything else as it is."""
    return json.dumps(value, sort_keys=True, default=str) if isinstance(value, (list, tuple, dict)) else value


def group_keys(df: pd.DataFrame, columns: Iterable[str]) -> list[pd.Series]:
    """``columns`` as groupby keys (lists and mappings as their JSON text: ``as_json``)."""
    return [df[c].map(as_json) for c in columns]
