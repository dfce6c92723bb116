"""The model's Markdown as a person reads it without rendering: the form the core sends a
channel with `markup="plain"`, and the plain fallback (Matrix's `body`) beside a rendering."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from markdown_it.token import Token


def plain_text(markdown: str) -> str:
    """Markdown as a person reads it without rendering: no markers, links as `text (url)`,
    code as written, lists with their bullets and numbers, a table's rows cell | cell."""
    from markdown_it import MarkdownIt  # only channels without markup pay for it

    parser = MarkdownIt("commonmark").enable("table").enable("strikethrough")
    lines: list[str] = []
    quote = ""  # "> " per open quote
    numbers: list[int | None] = []  # per open list: its next number, None when bulleted
    marker = ""  # the open item's bullet, for its first line
    hang = ""  # ... and the indent of its later lines
    row: list[str] | None = None  # the table row being read

    def add(text: str) -> None:
        nonlocal marker
        if lines and not numbers:
            lines.append("")  # paragraphs apart; a list's items line by line
        for line in text.split("\n"):
            lines.append(f"{quote}{marker or hang}{line}")
            marker = ""

    for tok in parser.parse(markdown):
        kind = tok.type
        if kind == "blockquote_open":
            quote += "> "
        elif kind == "blockquote_close":
            quote = quote[:-2]
        elif kind in ("bullet_list_open", "ordered_list_open", "table_open"):
            if lines and not numbers:
                lines.append("")  # a list or a table apart from what came before
            if kind == "table_open":
                continue
            start = tok.attrGet("start")
            numbers.append(None if kind == "bullet_list_open" else int(start or 1))
        elif kind in ("bullet_list_close", "ordered_list_close"):
            numbers.pop()
            hang = "  " * len(numbers)
        elif kind == "list_item_open" and numbers:
            number = numbers[-1]
            marker = "  " * (len(numbers) - 1) + ("- " if number is None else f"{number}. ")
            hang = " " * len(marker)
            numbers[-1] = None if number is None else number + 1
        elif kind == "tr_open":
            row = []
        elif kind == "tr_close" and row is not None:
            cells, row = " | ".join(row), None
            lines.append(f"{quote}{cells}")
        elif kind == "inline":
            if row is not None:
                row.append(_inline(tok.children or []))
            else:
                add(_inline(tok.children or []))
        elif kind in ("fence", "code_block", "html_block"):
            add(tok.content.rstrip("\n"))
        elif kind == "hr":
            add("———")
    return "\n".join(lines).strip("\n")


def _inline(children: Sequence[Token]) -> str:
    out: list[str] = []
    links: list[str] = []
    for child in children:
        kind = child.type
        if kind in ("text", "code_inline", "html_inline"):
            out.append(child.content)
        elif kind == "softbreak" or kind == "hardbreak":
            out.append("\n")
        elif kind == "link_open":
            links.append(str(child.attrGet("href") or ""))
        elif kind == "link_close":
            href = links.pop() if links else ""
            shown = out[-1] if out else ""
            if href and href != shown and f"mailto:{shown}" != href:
                out.append(f" ({href})")
        elif kind == "image":
            alt = "".join(c.content for c in child.children or [])
            out.append(f"{alt} ({child.attrGet('src')})" if alt else str(child.attrGet("src")))
    return "".join(out)
