"""The model's Markdown written again in a platform's own line markup (Slack's mrkdwn,
Discord's Markdown): the blocks are walked here once, and each platform's `LineMarkup` says how
it marks emphasis, code and links and how its text is escaped.

What the model or a web page wrote is data: its text goes through the platform's escaping, a
link opens only with http, https or mailto, raw HTML is shown as text. A construct the platform
lacks is written out: a table as aligned text in a code block, a quote in a quote merged."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from nanomem.text.markdown_parse import (
    aligned_table,
    markdown_parser,
    plain_inline,
    safe_url,
    table_rows,
)

if TYPE_CHECKING:
    from markdown_it.token import Token

_LANG_JUNK = re.compile(r"[^\w+#.-]")


class LineMarkup:
    """How a platform marks text; a subclass gives its markers and escaping."""

    strong = ("*", "*")
    em = ("_", "_")
    strike = ("~", "~")
    bullet = "• "
    rule = "———"

    def text(self, text: str) -> str:
        """Text the model wrote, escaped so it shows as written and does nothing else."""
        return text

    def lines(self, text: str) -> str:
        """A paragraph once written, escaped where only a line's start matters."""
        return text

    def code(self, text: str) -> str:
        return f"`{text}`"

    def fence(self, info: str, code: str) -> str:
        return f"```{info}\n{code}\n```"

    def link(self, label: str, href: str | None, plain: str) -> str:
        """A link: `label` rendered, `plain` its text alone; `href` None when it may not open."""
        return label

    def heading(self, level: int, text: str) -> str:
        return f"{self.strong[0]}{text}{self.strong[1]}"


def render_lines(markdown: str, markup: LineMarkup) -> str:
    """`markdown` in `markup`'s platform's own markup; "" for whitespace only."""
    blocks, _ = _Walk(markup).blocks(markdown_parser().parse(markdown), 0, "", False)
    return "\n\n".join(b for b in blocks if b.strip()).strip()


class _Walk:
    def __init__(self, markup: LineMarkup) -> None:
        self.markup = markup

    def inline(self, tokens: Sequence[Token] | None, bold: bool = False) -> str:
        m = self.markup
        out: list[str] = []
        marks = {"strong": m.strong, "em": m.em, "s": m.strike}
        active = {"strong": int(bold), "em": 0, "s": 0}  # a marker inside its own shows nothing
        links: list[tuple[int, str | None, int]] = []  # (len(out) at open, href, first token)
        for k, tok in enumerate(tokens or ()):
            kind, _, edge = tok.type.rpartition("_")
            if tok.type in ("text", "html_inline"):
                out.append(m.text(tok.content))
            elif tok.type in ("softbreak", "hardbreak"):
                out.append("\n")
            elif tok.type == "code_inline":
                out.append(m.code(tok.content))
            elif kind in marks and edge in ("open", "close"):
                active[kind] += 1 if edge == "open" else -1
                if active[kind] == (1 if edge == "open" else 0):
                    out.append(marks[kind][0] if edge == "open" else marks[kind][1])
            elif tok.type == "link_open":
                links.append((len(out), safe_url(tok.attrGet("href")), k + 1))
            elif tok.type == "link_close" and links:
                start, href, first = links.pop()
                label = "".join(out[start:])
                del out[start:]
                plain = plain_inline((tokens or [])[first:k])
                out.append(m.link(label, href, plain) if not links else label)
            elif tok.type == "image":
                alt = plain_inline(tok.children) or tok.content
                src = None if links else safe_url(tok.attrGet("src"))
                out.append(m.link(m.text(alt or str(src or "")), src, alt))
        return "".join(out)

    def blocks(
        self, tokens: Sequence[Token], i: int, stop: str, quoted: bool
    ) -> tuple[list[str], int]:
        """Block tokens from `i` up to the `stop` token type: (blocks, the index after it)."""
        m = self.markup
        out: list[str] = []
        while i < len(tokens) and tokens[i].type != stop:
            tok = tokens[i]
            i += 1
            if tok.type == "paragraph_open":
                out.append(m.lines(self.inline(tokens[i].children)))
            elif tok.type == "heading_open":
                text = self.inline(tokens[i].children, bold=True)
                out.append(m.heading(int(tok.tag[1:]), text) if text.strip() else "")
            elif tok.type in ("fence", "code_block"):
                lang = _LANG_JUNK.sub("", (tok.info.split() or [""])[0])[:32]
                code = tok.content.rstrip("\n")
                out.append(m.fence(lang, code) if code.strip() else "")
            elif tok.type == "html_block":
                out.append(m.lines(m.text(tok.content.rstrip("\n"))))
            elif tok.type == "hr":
                out.append(m.rule)
            elif tok.type == "table_open":
                rows, aligns, header_rows, i = table_rows(tokens, i)
                out.append(m.fence("", aligned_table(rows, aligns, header_rows)))
            elif tok.type == "blockquote_open":
                inner, i = self.blocks(tokens, i, "blockquote_close", True)
                body = "\n\n".join(b for b in inner if b.strip())
                # No platform here nests quotes: an inner one merges into the outer.
                out.append(body if quoted else _prefixed(body, "> "))
            elif tok.type in ("bullet_list_open", "ordered_list_open"):
                start = tok.attrGet("start")
                number = 1 if start is None else int(start)
                items: list[str] = []
                while tokens[i].type == "list_item_open":
                    inner, i = self.blocks(tokens, i + 1, "list_item_close", quoted)
                    marker = f"{number}. " if tok.type == "ordered_list_open" else m.bullet
                    body = "\n".join(b for b in inner if b.strip())
                    items.append(marker + body.replace("\n", "\n" + " " * len(marker)))
                    number += 1
                out.append("\n".join(items))
                i += 1  # the list's closing token
        return out, i + 1


def _prefixed(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.split("\n"))
