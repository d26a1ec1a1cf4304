"""Markdown tables: the report's, and the summaries of ``compare`` and ``gate``."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any


def one_line(value: Any) -> str:
    """A text kept on its line: a process's command line may hold newlines, which end a list item
    or a table row."""
    return re.sub(r"\s*[\r\n]+\s*", " ", str(value))


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table (pipes in cells escaped, line breaks made spaces)."""

    def cell(value: Any) -> str:
        return one_line(value).replace("|", "\\|")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
