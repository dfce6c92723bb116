"""The model's Markdown as the HTML subset a platform shows (Telegram's `parse_mode=HTML`,
Matrix's `formatted_body`), and how long that is the platform's way.

What the model or a web page wrote is data, never markup: raw HTML is shown as text, a link
opens only with a scheme the platform's subset allows (http, https, mailto), every attribute
is escaped. A construct the subset has no tag for is written out: a heading in bold, a list
as bullet lines, a table as aligned monospace text, a quote within a quote merged into it."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape, unescape
from typing import TYPE_CHECKING

from nanomem.text.markdown_parse import (
    WEB_SCHEMES,
    aligned_table,
    markdown_parser,
    plain_inline,
    safe_url,
    table_rows,
)
from nanomem.text.measure import json_bytes, utf16_units

if TYPE_CHECKING:
    from markdown_it.token import Token

__all__ = [
    "MATRIX_HTML",
    "TELEGRAM_HTML",
    "HtmlSubset",
    "html_text",
    "matrix_content",
    "matrix_event_bytes",
    "render_html",
    "telegram_units",
]


@dataclass(frozen=True)
class HtmlSubset:
    """The HTML a platform shows: the tags it takes, whether a quote may hold a quote, the
    schemes a link may open."""

    tags: frozenset[str]
    nested_quotes: bool = True
    schemes: frozenset[str] = WEB_SCHEMES
    # A code block's HTML from its text and language (a highlighter, which escapes the text
    # itself); None: the text escaped, unhighlighted.
    highlight: Callable[[str, str], str] | None = None


# No tg:// links: `tg://user?id=` would let the model's text (or a page it read) name any
# account as a link that opens that person's profile, a mention nobody gave it.
TELEGRAM_HTML = HtmlSubset(
    frozenset({"b", "i", "s", "code", "pre", "a", "blockquote"}), nested_quotes=False
)
MATRIX_HTML = HtmlSubset(
    frozenset(
        {"strong", "em", "del", "code", "pre", "a", "blockquote", "p", "br", "ul", "ol", "li"}
        | {f"h{n}" for n in range(1, 7)}
        | {"hr", "table", "thead", "tbody", "tr", "th", "td"}
    )
)

_LANG_JUNK = re.compile(r"[^\w+#.-]")
_TAG = re.compile(r"</?[A-Za-z][\w-]*[^<>]*>")


def _esc(text: str) -> str:
    return escape(text, quote=False)


def _attr(text: str) -> str:
    return _esc(text).replace('"', "&quot;")


class _Renderer:
    def __init__(self, subset: HtmlSubset) -> None:
        self.subset = subset
        tags = subset.tags
        self.blocks = "p" in tags  # structured HTML (Matrix) rather than text with tags
        self.names = {
            "strong": "b" if "b" in tags else "strong",
            "em": "i" if "i" in tags else "em",
            "s": "s" if "s" in tags else "del",
        }
        self.br = "<br>" if "br" in tags else "\n"

    def inline(self, tokens: Sequence[Token] | None, bold: bool = False) -> str:
        """Inline tokens as HTML; `bold`: already inside bold (a heading)."""
        out: list[str] = []
        # Same-tag nesting (<b><b>) is dropped: Telegram refuses it, and it shows nothing.
        active = {"strong": int(bold), "em": 0, "s": 0}
        links: list[tuple[bool, int, str]] = []  # (emitted <a>, len(out) at open, href)
        for tok in tokens or ():
            kind, _, edge = tok.type.rpartition("_")
            if tok.type in ("text", "html_inline"):  # raw HTML is shown, never passed through
                out.append(_esc(tok.content))
            elif tok.type in ("softbreak", "hardbreak"):
                out.append(self.br)
            elif tok.type == "code_inline":
                out.append(f"<code>{_esc(tok.content)}</code>")
            elif kind in active and edge in ("open", "close"):
                name = self.names[kind]
                active[kind] += 1 if edge == "open" else -1
                if active[kind] == (1 if edge == "open" else 0):
                    out.append(f"<{name}>" if edge == "open" else f"</{name}>")
            elif tok.type == "link_open":
                href = safe_url(tok.attrGet("href"), self.subset.schemes)
                emit = href is not None and not any(e for e, _, _ in links)
                if emit:
                    out.append(f'<a href="{_attr(href or "")}">')
                links.append((emit, len(out), href or ""))
            elif tok.type == "link_close" and links:
                emit, start, href = links.pop()
                if emit:
                    out.extend([_esc(href), "</a>"] if len(out) == start else ["</a>"])
            elif tok.type == "image":  # shown as a link to it: no platform here takes <img src>
                src = safe_url(tok.attrGet("src"), self.subset.schemes)
                alt = plain_inline(tok.children) or tok.content
                if src and not any(e for e, _, _ in links):
                    out.append(f'<a href="{_attr(src)}">{_esc(alt or src)}</a>')
                else:
                    out.append(_esc(alt))
        return "".join(out)

    def code(self, tok: Token) -> str:
        body = _esc(tok.content.rstrip("\n"))
        if not body.strip():
            return ""
        lang = _LANG_JUNK.sub("", (tok.info.split() or [""])[0])[:32]
        if self.subset.highlight is not None:
            body = self.subset.highlight(tok.content.rstrip("\n"), lang)
        if lang:
            return f'<pre><code class="language-{lang}">{body}</code></pre>'
        return f"<pre><code>{body}</code></pre>" if self.blocks else f"<pre>{body}</pre>"

    def table(self, tokens: Sequence[Token], i: int) -> tuple[str, int]:
        if "table" not in self.subset.tags:
            rows, aligns, header_rows, i = table_rows(tokens, i)
            return f"<pre>{_esc(aligned_table(rows, aligns, header_rows))}</pre>", i
        cells: list[list[str]] = []
        header_rows = 0
        while tokens[i].type != "table_close":
            tok = tokens[i]
            if tok.type == "tr_open":
                cells.append([])
            elif tok.type == "inline":
                cells[-1].append(self.inline(tok.children))
            elif tok.type == "thead_close":
                header_rows = len(cells)
            i += 1
        return _html_table(cells, header_rows), i + 1

    def render(
        self, tokens: Sequence[Token], i: int, stop: str, quoted: bool
    ) -> tuple[list[str], int]:
        """Block tokens from `i` up to the `stop` token type: (blocks, the index after it)."""
        blocks: list[str] = []
        while i < len(tokens) and tokens[i].type != stop:
            tok = tokens[i]
            i += 1
            if tok.type == "paragraph_open":
                text = self.inline(tokens[i].children)
                blocks.append(f"<p>{text}</p>" if self.blocks and not tok.hidden else text)
            elif tok.type == "heading_open":
                level = tok.tag
                if level in self.subset.tags:
                    blocks.append(f"<{level}>{self.inline(tokens[i].children)}</{level}>")
                else:
                    text = self.inline(tokens[i].children, bold=True)
                    bold = self.names["strong"]
                    blocks.append(f"<{bold}>{text}</{bold}>" if text.strip() else "")
            elif tok.type in ("fence", "code_block"):
                blocks.append(self.code(tok))
            elif tok.type == "html_block":
                text = _esc(tok.content.rstrip("\n"))
                blocks.append(f"<p>{text.replace(chr(10), self.br)}</p>" if self.blocks else text)
            elif tok.type == "hr":
                blocks.append("<hr>" if "hr" in self.subset.tags else "———")
            elif tok.type == "table_open":
                text, i = self.table(tokens, i)
                blocks.append(text)
            elif tok.type == "blockquote_open":
                inner, i = self.render(tokens, i, "blockquote_close", True)
                body = self.join(inner)
                flat = quoted and not self.subset.nested_quotes  # merged into the outer quote
                blocks.append(body if flat or not body else f"<blockquote>{body}</blockquote>")
            elif tok.type in ("bullet_list_open", "ordered_list_open"):
                text, i = self.items(tokens, i, tok, quoted)
                blocks.append(text)
        return blocks, i + 1

    def items(self, tokens: Sequence[Token], i: int, tok: Token, quoted: bool) -> tuple[str, int]:
        ordered = tok.type == "ordered_list_open"
        start = tok.attrGet("start")
        number = 1 if start is None else int(start)
        items: list[str] = []
        while tokens[i].type == "list_item_open":
            inner, i = self.render(tokens, i + 1, "list_item_close", quoted)
            if self.blocks:
                items.append(f"<li>{''.join(inner)}</li>")
            else:
                marker = f"{number}. " if ordered else "• "
                items.append(marker + _indent("\n".join(b for b in inner if b.strip()), "  "))
            number += 1
        if self.blocks:
            tag = "ol" if ordered else "ul"
            first = f' start="{int(start)}"' if ordered and start not in (None, 1, "1") else ""
            return f"<{tag}{first}>{''.join(items)}</{tag}>", i + 1
        return "\n".join(items), i + 1

    def join(self, blocks: list[str]) -> str:
        return ("\n" if self.blocks else "\n\n").join(b for b in blocks if b.strip())


def _indent(text: str, prefix: str) -> str:
    """Prefix every line but the first, leaving lines inside `<pre>` untouched."""
    lines = text.split("\n")
    out = [lines[0]]
    in_pre = lines[0].rfind("<pre>") > lines[0].rfind("</pre>")
    for line in lines[1:]:
        out.append(line if in_pre or not line else prefix + line)
        opened, closed = line.rfind("<pre>"), line.rfind("</pre>")
        in_pre = opened > closed if max(opened, closed) >= 0 else in_pre
    return "\n".join(out)


def _html_table(rows: list[list[str]], header_rows: int) -> str:
    def row(cells: list[str], tag: str) -> str:
        return "<tr>" + "".join(f"<{tag}>{c}</{tag}>" for c in cells) + "</tr>"

    head = "".join(row(r, "th") for r in rows[:header_rows])
    body = "".join(row(r, "td") for r in rows[header_rows:])
    return f"<table><thead>{head}</thead><tbody>{body}</tbody></table>"


def render_html(markdown: str, subset: HtmlSubset) -> str:
    """The model's Markdown as `subset`'s HTML; "" for whitespace only."""
    renderer = _Renderer(subset)
    blocks, _ = renderer.render(markdown_parser().parse(markdown), 0, "", False)
    html = renderer.join(blocks).strip()
    if len(blocks) == 1 and html.startswith("<p>") and html.count("<p>") == 1:
        return html[3:-4]  # one paragraph is a line of text, without a paragraph's margins
    return html


def html_text(html: str) -> str:
    """What a person reads of our HTML: tags dropped, entities as their characters."""
    return unescape(_TAG.sub("", html))


def telegram_units(markdown: str) -> int:
    """What Telegram counts against its 4,096: the UTF-16 units of the rendered message's
    text (tags not counted, an entity as its character)."""
    return utf16_units(html_text(render_html(markdown, TELEGRAM_HTML)))


def matrix_content(markdown: str) -> dict[str, str]:
    """A Matrix `m.text` message's content: the HTML and, for clients without it, the plain
    text."""
    from nanomem.text.markdown_plain import plain_text

    return {
        "msgtype": "m.text",
        "body": plain_text(markdown),
        "format": "org.matrix.custom.html",
        "formatted_body": render_html(markdown, MATRIX_HTML),
    }


def matrix_event_bytes(markdown: str) -> int:
    """The bytes of that content as JSON, what counts against an event's 64 KiB (the event's
    own fields, a few hundred bytes, come on top: leave room for them in `max_chars`)."""
    return json_bytes(matrix_content(markdown))
