"""How the commands print: one console, and tables fitted to the terminal (or, on a pipe, plain lines)."""

from __future__ import annotations

import io
import os
import re
import shutil
import sys
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from benchbay.record import Status

if TYPE_CHECKING:  # pandas loads lazily: `benchbay --help` and `validate` stay quick
    import pandas as pd

# soft wrap: a message is one line however narrow the terminal or pipe; tables fit themselves
console = Console(soft_wrap=True)

#: any other status (a failure, or repeats that disagree) is bold red
_STATUS_STYLE = {Status.OK: "green", Status.SKIPPED: "dim", "": ""}
_NUMBER = re.compile(r"^[-+]?[\d.]+(e[-+]?\d+)?[x%]?$")


def print_table(frame: pd.DataFrame, title: str) -> None:
    """A display table fitted to the terminal (long texts cut: the full ones are in --export), or
    on a pipe plain lines as wide as they need."""
    texts = [c for c in frame.columns if c in ("notes", "reason", "what it does")]
    # records are untrusted: a line break in a stored label or reason would forge a row of its own
    frame = frame.map(_one_line).rename(columns=_one_line)
    title = _one_line(title)
    if not console.is_terminal:
        widths = [max([len(str(c)), *(len(str(v)) for v in frame[c])]) for c in frame.columns]
        # COLUMNS set on a pipe: the long texts give way to fit it (12 characters at least)
        over = sum(widths) + 2 * (len(widths) - 1) - int(os.environ.get("COLUMNS") or sys.maxsize)
        for i, column in enumerate(frame.columns):
            if column in texts and over > 0:
                cut = min(over, widths[i] - 12)
                widths[i], over = widths[i] - max(cut, 0), over - max(cut, 0)
        lines = [title, *("  ".join(_cut(str(v), w).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
                          for row in [frame.columns, *frame.itertuples(index=False)])]
        print("\n".join(lines) + "\n")
        return
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, header_style="bold")
    for column in frame.columns:
        # only the long texts are wrappable columns, so only they give way to fit; each cell stays one line
        numeric = frame[column].map(lambda v: v == "" or bool(_NUMBER.match(str(v)))).all()
        table.add_column(column, no_wrap=column not in texts, min_width=12 if column in texts else None,
                         justify="right" if numeric else "left")
    for row in frame.itertuples(index=False):
        cells = [Text(str(v), no_wrap=True, overflow="ellipsis",
                      style=_STATUS_STYLE.get(str(v), "bold red") if c == "status" else "")
                 for c, v in zip(frame.columns, row, strict=True)]
        table.add_row(*cells)
    console.print(table, highlight=False, soft_wrap=False)


def _one_line(value: object) -> str:
    """The text of a cell on one line: control characters written as their escapes."""
    text = str(value)
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def print_wrapped(frame: pd.DataFrame, title: str) -> None:
    """A listing fitted to the terminal's width (on a pipe: COLUMNS, else 100), every cell wrapped
    and none cut: a knob's values and help are what `list` is for."""
    width = shutil.get_terminal_size((100, 24)).columns
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, header_style="bold",
                  expand=len(frame.columns) > 2)
    for i, column in enumerate(frame.columns):  # the name as it is; the values and the help share the rest, 1:2
        table.add_column(column, overflow="fold", ratio=None if i == 0 else i)
    for row in frame.itertuples(index=False):
        table.add_row(*(Text(str(v)) for v in row))
    out = Console(width=width, file=io.StringIO(), color_system=None)
    out.print(table, highlight=False)
    print("\n".join(line.rstrip() for line in out.file.getvalue().splitlines()))
