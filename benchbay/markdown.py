"""Markdown tables: the report's, and the summaries of ``compare`` and ``gate``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table (pipes in cells escaped, line breaks made spaces)."""

    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
