"""Markdown for the terminal that keeps every character written: a single newline stays a new
line (CommonMark would join the lines: a file's three lines, `ls -la`'s output), and text that
looks like HTML (`a<b`, `<div>`, `<<end tag>>`) is shown as written instead of dropped, as are
entities (`&amp;`). Fences, lists, headings, emphasis and links still render.

A reply being written is shown block by block (`Blocks`): a top-level block is finished once a
later one has begun on a complete line; it is printed once, and only the block still being
written is redrawn. So a redraw costs what the last block costs, not the whole reply."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from rich.markdown import Markdown

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.token import Token


@functools.cache
def _parser() -> MarkdownIt:
    from markdown_it import MarkdownIt

    # html off: what looks like a tag is text. entity off: `&amp;` is shown as written.
    parser = MarkdownIt("commonmark", {"html": False}).enable("strikethrough").enable("table")
    return parser.disable("entity")


class Literal(Markdown):
    """rich's Markdown, parsed so that nothing written is lost (see the module's docstring)."""

    def __init__(self, markup: str, **options: Any) -> None:
        # "default": a paragraph's lines are not padded to the width with spaces (copied
        # from the terminal, a line ends where it was written to end).
        options.setdefault("justify", "default")
        super().__init__("", **options)  # parses nothing: ours replaces it
        self.markup = markup
        self.parsed = _hard_breaks(_parser().parse(markup))

    @property
    def opens_with_blank_line(self) -> bool:
        """Whether rich draws a blank line before it (a list, a quote or a table first): a
        block printed after another then needs no blank line of ours between them."""
        first = next((token.type for token in self.parsed if token.level == 0), "")
        return first in ("bullet_list_open", "ordered_list_open", "blockquote_open", "table_open")


def _hard_breaks(tokens: list[Token]) -> list[Token]:
    """Every line break kept as written, with the indent of the line after it (CommonMark
    drops both: a paragraph's lines are joined, and each line's leading spaces go)."""
    from markdown_it.token import Token

    for token in tokens:
        children = token.children or []
        breaks = sum(1 for c in children if c.type in ("softbreak", "hardbreak"))
        lines = token.content.split("\n")
        # A line break inside a code span is no break: then the lines cannot be matched.
        following = iter(lines[1:] if breaks == len(lines) - 1 else [])
        rebuilt: list[Token] = []
        for child in children:
            rebuilt.append(child)
            if child.type in ("softbreak", "hardbreak"):
                child.type = "hardbreak"
                line = next(following, "")
                if indent := line[: len(line) - len(line.lstrip(" \t"))]:
                    rebuilt.append(Token("text", "", 0, content=indent))
        if token.children is not None:
            token.children = rebuilt
    return tokens


def finished_lines(text: str) -> int:
    """How many of `text`'s lines hold top-level blocks that nothing written later can change:
    those before the last block that begins on a complete line. 0 while there is one block."""
    end = text.rfind("\n")
    if end < 0:
        return 0
    starts = [
        token.map[0]
        for token in _parser().parse(text[: end + 1])
        if token.level == 0 and token.nesting >= 0 and token.map is not None
    ]
    return starts[-1] if len(starts) > 1 else 0


def split_lines(text: str, count: int) -> tuple[str, str]:
    """`text` cut after its first `count` lines."""
    at = 0
    for _ in range(count):
        at = text.index("\n", at) + 1
    return text[:at], text[at:]


def tail(text: str, lines: int) -> str:
    """The last `lines` lines of a block being written, to redraw; an open fence keeps its
    opening line, so what is drawn is still code."""
    rows = text.split("\n")
    if len(rows) <= lines:
        return text
    opener = [rows[0]] if is_fence(rows[0]) else []
    return "\n".join([*opener, *rows[-lines:]])


def is_fence(line: str) -> bool:
    """Whether `line` opens a code fence (at most three spaces in, as CommonMark allows)."""
    return line[:4].lstrip(" ").startswith(("```", "~~~")) and not line.startswith("    ")
