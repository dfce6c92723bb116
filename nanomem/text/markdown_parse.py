"""The model's Markdown as every renderer reads it (nanomem/text/markdown_html.py,
markdown_lines.py): one parser, one rule for which links may open, a table's rows as text."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.token import Token

WEB_SCHEMES = frozenset({"http", "https", "mailto"})

_SCHEME = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*):")
_PARSER: list[MarkdownIt] = []


def markdown_parser() -> MarkdownIt:
    """CommonMark with tables and strikethrough, raw HTML recognised (to be shown as text),
    every link parsed (each renderer vets its scheme, instead of markdown-it printing a
    refused one as source). Nesting stops at markdown-it's 20 levels."""
    if not _PARSER:
        from markdown_it import MarkdownIt  # loaded by the first reply rendered

        class Parser(MarkdownIt):
            def validateLink(self, url: str) -> bool:
                return True

        _PARSER.append(Parser("commonmark", {"html": True}).enable(["strikethrough", "table"]))
    return _PARSER[0]


def safe_url(url: object, schemes: frozenset[str] = WEB_SCHEMES) -> str | None:
    """`url` when its scheme is one of `schemes`, else None (javascript:, data:, relative)."""
    text = str(url or "")
    match = _SCHEME.match(text)
    return text if match and match.group(1).lower() in schemes else None


def plain_inline(tokens: Sequence[Token] | None) -> str:
    """The visible text of inline tokens, formatting dropped (table cells, alt text)."""
    parts: list[str] = []
    for tok in tokens or ():
        if tok.type in ("text", "code_inline", "html_inline"):
            parts.append(tok.content)
        elif tok.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif tok.type == "image":
            parts.append(plain_inline(tok.children) or tok.content)
    return "".join(parts)


def table_rows(tokens: Sequence[Token], i: int) -> tuple[list[list[str]], list[str], int, int]:
    """From just after `table_open`: (rows of cell text, alignments, header rows, the index
    after `table_close`)."""
    rows: list[list[str]] = []
    aligns: list[str] = []
    header_rows = 0
    while tokens[i].type != "table_close":
        tok = tokens[i]
        if tok.type == "tr_open":
            rows.append([])
        elif tok.type == "th_open":
            aligns.append(str(tok.attrGet("style") or "").removeprefix("text-align:"))
        elif tok.type == "inline":
            rows[-1].append(plain_inline(tok.children).strip())
        elif tok.type == "thead_close":
            header_rows = len(rows)
        i += 1
    return rows, aligns, header_rows, i + 1


def aligned_table(rows: list[list[str]], aligns: list[str], header_rows: int) -> str:
    """A table as aligned monospace text, for a platform without table markup."""
    ncols = max(len(row) for row in rows)
    rows = [row + [""] * (ncols - len(row)) for row in rows]
    aligns = aligns + [""] * (ncols - len(aligns))
    widths = [max(len(row[c]) for row in rows) for c in range(ncols)]
    if len(rows) * sum(widths) > 4 * sum(map(len, map("".join, rows))) + 4096:
        widths = [0] * ncols  # one long cell would pad every row to it: not aligned then
    pad = {"right": str.rjust, "center": str.center}
    lines = [
        " | ".join(
            pad.get(a, str.ljust)(cell, w) for cell, w, a in zip(row, widths, aligns, strict=True)
        ).rstrip()
        for row in rows
    ]
    if header_rows:
        lines.insert(header_rows, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)
