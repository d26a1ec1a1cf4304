"""A report's document: a list of blocks (headings, texts, tables of display strings, images),
rendered to Markdown (images linked) and to one self-contained HTML page (images embedded as
base64), so both say the same."""

from __future__ import annotations

import base64
import html as html_lib
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from benchbay.markdown import markdown_table
from benchbay.record import Status


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Text:
    text: str


@dataclass
class Table:
    frame: pd.DataFrame  # display strings; a "status" column gets marked when not ok
    caption: str = ""


@dataclass
class Image:
    path: Path
    caption: str


Block = Heading | Text | Table | Image


def _status_class(value: str) -> str:
    """``ok``, ``mixed`` (repeats disagree) or the failing status itself (``oom``, ``crash``...)."""
    if value in ("", Status.OK):
        return "ok"
    return "mixed" if "," in value else re.sub(r"[^a-z]", "", value.lower()) or "other"


def markdown(blocks: list[Block]) -> str:
    lines: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            lines += ["#" * block.level + " " + block.text, ""]
        elif isinstance(block, Text):
            lines += [block.text, ""]
        elif isinstance(block, Image):
            lines += [f"![{block.caption}]({block.path.name})", ""]
        elif isinstance(block, Table):
            if block.caption:
                lines += [f"*{block.caption}*", ""]
            lines += [_markdown_table(block.frame), ""]
    return "\n".join(lines)


def _markdown_table(frame: pd.DataFrame) -> str:
    def cell(column: str, value: str) -> str:
        return f"**{value.upper()}**" if column == "status" and value and value != Status.OK else value

    rows = [[cell(c, v) for c, v in zip(frame.columns, row, strict=True)] for row in frame.itertuples(index=False)]
    return markdown_table(frame.columns, rows)


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
.wide { overflow-x: auto; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; }
th { background: #f2f2f2; } td:first-child { text-align: left; }
td.status-oom { background: #fbd5d5; font-weight: bold; } td.status-crash, td.status-timeout,
td.status-error, td.status-diverged { background: #f8c4a0; font-weight: bold; }
td.status-mixed { background: #fff1b8; font-weight: bold; } td.status-ok { color: #15692b; }
td.status-skipped, td.status-missing { color: #777; font-style: italic; }
figure { margin: 1em 0; } figure img { max-width: 100%; } figcaption { font-size: 0.85em; color: #555; }
caption { caption-side: top; text-align: left; font-style: italic; }
"""

# records, for a headless browser's --dump-dom, how many embedded images decoded
_LOAD_CHECK = """
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  var loaded = images.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  document.body.setAttribute("data-images", images.length);
  document.body.setAttribute("data-loaded", loaded);
});
"""


def html(blocks: list[Block], title: str) -> str:
    esc = html_lib.escape
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{esc(title)}</title>",
             f"<style>{_CSS}</style><script>{_LOAD_CHECK}</script></head><body>"]
    for block in blocks:
        if isinstance(block, Heading):
            parts.append(f"<h{block.level}>{esc(block.text)}</h{block.level}>")
        elif isinstance(block, Text):
            parts.append(f"<p>{esc(block.text)}</p>")
        elif isinstance(block, Image):
            data = base64.b64encode(block.path.read_bytes()).decode("ascii")
            parts.append(f"<figure><img alt=\"{esc(block.caption)}\" src=\"data:image/png;base64,{data}\">"
                         f"<figcaption>{esc(block.caption)}</figcaption></figure>")
        elif isinstance(block, Table):
            parts.append(_html_table(block.frame, block.caption))
    parts.append("</body></html>")
    return "\n".join(parts)


def _html_table(frame: pd.DataFrame, caption: str) -> str:
    esc = html_lib.escape

    def cell(column: str, value: str) -> str:
        attrs = f' class="status-{_status_class(value)}"' if column == "status" else ""
        return f"<td{attrs}>{esc(value)}</td>"

    head = "".join(f"<th>{esc(c)}</th>" for c in frame.columns)
    body = "".join("<tr>" + "".join(cell(c, v) for c, v in zip(frame.columns, row, strict=True)) + "</tr>"
                   for row in frame.itertuples(index=False))
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return f'<div class="wide"><table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'
