"""Markdown → Telegram Bot API HTML (``parse_mode=HTML``), split into messages that fit the limit.

Telegram's limit counts UTF-16 code units of the visible text (after entity parsing), so that
is what splitting measures: not Python characters, not tags.

Kept free of python-telegram-bot so it stays a pure, easily tested text transformation.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from html import escape, unescape

from markdown_it import MarkdownIt
from markdown_it.token import Token

from nanomem.text.utf8 import clean_text

__all__ = [
    "TELEGRAM_LIMIT",
    "halves",
    "html_to_plain",
    "markdown_to_html",
    "message_chunks",
    "render_chunks",
    "split_html",
    "split_plain",
    "too_long",
    "utf16_length",
    "visible_length",
]

TELEGRAM_LIMIT = 4096

_SAFE_SCHEMES = frozenset({"http", "https", "tg", "mailto", "ftp"})
_SCHEME_RE = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*):")
_LANG_JUNK_RE = re.compile(r"[^\w+#.-]")
# Our own HTML is regular: tags never contain '<' or '>' and text is fully escaped, so a
# tokenizer of "tag | entity | single character" is exact; single characters allow hard cuts.
_ATOM_RE = re.compile(r"<[^<>]*>|&(?:#\d+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);|.", re.DOTALL)
_TAG_RE = re.compile(r"<(/?)([A-Za-z][\w-]*)[^<>]*>")
_INLINE_TAGS = {"strong": "b", "em": "i", "s": "s"}
_MIN_LIMIT = 16  # far below any real use; a piece must at least hold one character

Tag = tuple[bool, str]  # (is_closing, name)
Stack = list[tuple[str, str]]  # (name, full opening tag) of currently open elements


class _Parser(MarkdownIt):
    def validateLink(self, url: str) -> bool:
        # Let every URL parse as a link: markdown-it would otherwise print rejected links as
        # raw Markdown source; we vet schemes ourselves and render unsafe links as their text.
        return True


_MD = _Parser("commonmark", {"html": True}).enable(["strikethrough", "table"])


def _esc(text: str) -> str:
    return escape(text, quote=False)


def _esc_attr(text: str) -> str:
    # Not escape(quote=True): its &#x27; is valid but needlessly noisy in an href.
    return _esc(text).replace('"', "&quot;")


def _safe_url(url: str | int | float | None) -> str | None:
    """Return ``url`` if its scheme is one Telegram can open safely, else None."""
    match = _SCHEME_RE.match(str(url or ""))
    return str(url) if match and match.group(1).lower() in _SAFE_SCHEMES else None


def _plain(tokens: Sequence[Token] | None) -> str:
    """Visible text of inline tokens, formatting dropped (for table cells and alt text)."""
    parts: list[str] = []
    for tok in tokens or ():
        if tok.type in ("text", "code_inline", "html_inline"):
            parts.append(tok.content)
        elif tok.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif tok.type == "image":
            parts.append(_plain(tok.children) or tok.content)
    return "".join(parts)


def _inline(tokens: Sequence[Token] | None, bold: bool = False) -> str:
    """Render inline tokens; ``bold`` means we are already inside ``<b>`` (headings)."""
    out: list[str] = []
    # Nesting counters suppress redundant same-tag nesting such as <b><b>, which Telegram dislikes.
    active = {"b": int(bold), "i": 0, "s": 0}
    links: list[tuple[bool, int, str]] = []  # (emitted <a>, len(out) at open, href)
    for tok in tokens or ():
        kind, _, edge = tok.type.rpartition("_")
        if tok.type in ("text", "html_inline"):  # raw HTML is shown, never passed through
            out.append(_esc(tok.content))
        elif tok.type in ("softbreak", "hardbreak"):
            out.append("\n")
        elif tok.type == "code_inline":
            out.append(f"<code>{_esc(tok.content)}</code>")
        elif kind in _INLINE_TAGS and edge in ("open", "close"):
            tag = _INLINE_TAGS[kind]
            if edge == "open":
                active[tag] += 1
                out.extend([f"<{tag}>"] if active[tag] == 1 else [])
            else:
                active[tag] -= 1
                out.extend([f"</{tag}>"] if active[tag] == 0 else [])
        elif tok.type == "link_open":
            href = _safe_url(tok.attrGet("href"))
            emit = href is not None and not any(e for e, _, _ in links)
            if emit:
                out.append(f'<a href="{_esc_attr(href or "")}">')
            links.append((emit, len(out), href or ""))
        elif tok.type == "link_close" and links:
            emit, start, href = links.pop()
            if emit:
                out.extend([_esc(href), "</a>"] if len(out) == start else ["</a>"])
        elif tok.type == "image":
            src = _safe_url(tok.attrGet("src"))
            alt = _plain(tok.children) or tok.content
            if src and not any(e for e, _, _ in links):
                out.append(f'<a href="{_esc_attr(src)}">{_esc(alt or src)}</a>')
            else:
                out.append(_esc(alt))
    return "".join(out)


def _indent(text: str, prefix: str) -> str:
    """Prefix every line but the first, leaving lines inside ``<pre>`` untouched."""
    lines = text.split("\n")
    out = [lines[0]]
    in_pre = lines[0].rfind("<pre>") > lines[0].rfind("</pre>")
    for line in lines[1:]:
        out.append(line if in_pre or not line else prefix + line)
        opened, closed = line.rfind("<pre>"), line.rfind("</pre>")
        in_pre = opened > closed if max(opened, closed) >= 0 else in_pre
    return "\n".join(out)


def _code(tok: Token) -> str:
    body = _esc(tok.content.rstrip("\n"))
    if not body.strip():
        return ""
    lang = _LANG_JUNK_RE.sub("", (tok.info.split() or [""])[0])
    return (
        f'<pre><code class="language-{lang}">{body}</code></pre>' if lang else f"<pre>{body}</pre>"
    )


def _table(tokens: Sequence[Token], i: int) -> tuple[str, int]:
    """Render a table as aligned monospace text; Telegram has no table markup."""
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
            rows[-1].append(_plain(tok.children).strip())
        elif tok.type == "thead_close":
            header_rows = len(rows)
        i += 1
    ncols = max(len(row) for row in rows)
    rows = [row + [""] * (ncols - len(row)) for row in rows]
    aligns += [""] * (ncols - len(aligns))
    widths = [max(len(row[c]) for row in rows) for c in range(ncols)]
    pad = {"right": str.rjust, "center": str.center}
    lines = [
        " | ".join(
            pad.get(a, str.ljust)(cell, w) for cell, w, a in zip(row, widths, aligns, strict=True)
        ).rstrip()
        for row in rows
    ]
    if header_rows:
        lines.insert(header_rows, "-+-".join("-" * w for w in widths))
    return f"<pre>{_esc(chr(10).join(lines))}</pre>", i + 1


def _blocks(tokens: Sequence[Token], i: int, stop: str, quoted: bool) -> tuple[list[str], int]:
    """Render block tokens from ``i`` up to the ``stop`` token type; returns (blocks, next i)."""
    blocks: list[str] = []
    while i < len(tokens) and tokens[i].type != stop:
        tok = tokens[i]
        i += 1
        if tok.type == "paragraph_open":
            blocks.append(_inline(tokens[i].children))
        elif tok.type == "heading_open":
            text = _inline(tokens[i].children, bold=True)
            blocks.append(f"<b>{text}</b>" if text.strip() else "")
        elif tok.type in ("fence", "code_block"):
            blocks.append(_code(tok))
        elif tok.type == "html_block":
            blocks.append(_esc(tok.content.rstrip("\n")))
        elif tok.type == "hr":
            blocks.append("———")
        elif tok.type == "table_open":
            text, i = _table(tokens, i)
            blocks.append(text)
        elif tok.type == "blockquote_open":
            inner, i = _blocks(tokens, i, "blockquote_close", True)
            body = "\n\n".join(b for b in inner if b.strip())
            # Telegram forbids nested blockquotes, so inner quotes merge into the outer one.
            blocks.append(body if quoted or not body else f"<blockquote>{body}</blockquote>")
        elif tok.type in ("bullet_list_open", "ordered_list_open"):
            start = tok.attrGet("start")
            number = 1 if start is None else int(start)
            items: list[str] = []
            while tokens[i].type == "list_item_open":
                marker = f"{number}. " if tok.type == "ordered_list_open" else "• "
                inner, i = _blocks(tokens, i + 1, "list_item_close", quoted)
                items.append(marker + _indent("\n".join(b for b in inner if b.strip()), "  "))
                number += 1
            blocks.append("\n".join(items))
            i += 1  # the list's closing token
    return blocks, i + 1


def markdown_to_html(markdown: str) -> str:
    """Convert Markdown to Telegram-safe HTML; whitespace-only input gives ``""``."""
    blocks, _ = _blocks(_MD.parse(markdown), 0, "", False)
    return "\n\n".join(b for b in blocks if b.strip()).strip()


def _tag(atom: str) -> Tag | None:
    match = _TAG_RE.fullmatch(atom) if atom[0] == "<" else None
    return (match.group(1) == "/", match.group(2).lower()) if match else None


def _apply(stack: Stack, atom: str, tag: Tag) -> None:
    if not tag[0]:
        stack.append((tag[1], atom))
    elif any(name == tag[1] for name, _ in stack):
        while stack.pop()[0] != tag[1]:  # tolerate sloppy nesting by closing the inner tags too
            pass


def _tidy(atoms: list[str]) -> str:
    """Strip whitespace at the chunk edges and drop tag pairs left empty by the cut."""
    tags = [_tag(a) for a in atoms]
    visible = [k for k, a in enumerate(atoms) if tags[k] is None and not a.isspace()]
    if not visible:
        return ""
    first, last = visible[0], visible[-1]
    last_nl = max((k for k in range(first) if atoms[k] == "\n"), default=-1)
    out: list[str] = []
    in_pre = False
    for k, atom in enumerate(atoms):
        tag = tags[k]
        # Keep the indentation of a first code line; drop every other edge whitespace.
        edge = k > last or (k < first and (k <= last_nl or not in_pre))
        if tag is None and edge and atom.isspace():
            continue
        if tag is not None:
            in_pre = (not tag[0]) if tag[1] == "pre" else in_pre
            prev = _tag(out[-1]) if out else None
            if tag[0] and prev == (False, tag[1]):
                out.pop()
                continue
        out.append(atom)
    return "".join(out)


def visible_length(html: str) -> int:
    """What Telegram counts against its limit: UTF-16 code units of the text after entity
    parsing (tags not counted, an entity counts as its character, an emoji beyond the BMP
    counts 2)."""
    return utf16_length(html_to_plain(html))


def utf16_length(text: str) -> int:
    if text.isascii():  # most of what is measured, many times over while a reply is split
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _weight(atom: str) -> int:
    if atom[0] == "<" and len(atom) > 1:
        return 0 if _tag(atom) else utf16_length(atom)
    return utf16_length(unescape(atom)) if atom[0] == "&" and len(atom) > 1 else utf16_length(atom)


def _take(
    atoms: list[str], weights: list[int], i: int, stack: Stack, limit: int
) -> tuple[int, str, Stack]:
    """Pick the best cut after ``atoms[i]``; returns (end index, chunk html, stack at end)."""
    size = 0  # visible text only: the tags reopened and closed around a chunk cost nothing
    best: list[int | None] = [None] * 4  # last cut by priority: any, space, line, paragraph
    seen_text, prev_text, k = False, "", i
    while k < len(atoms):
        atom = atoms[k]
        tag = _tag(atom)
        if size + weights[k] > limit:
            break
        size += weights[k]
        k += 1
        if tag:
            if not tag[0]:
                continue  # cutting right after an opening tag would leave it empty
            prio = 0
        else:
            seen_text = seen_text or not atom.isspace()
            prio = (3 if prev_text == "\n" else 2) if atom == "\n" else int(atom.isspace())
            prev_text = atom
        if seen_text:
            best[prio] = k
    end = k if k == len(atoms) else next((b for b in reversed(best) if b is not None), None)
    cur = list(stack)
    if end is None:
        # No cut with text before it fits (only opening tags did): go on unformatted.
        parts, size, k = [], 0, i
        while k < len(atoms) and ((tag := _tag(atoms[k])) or size + weights[k] <= limit):
            if tag:
                _apply(cur, atoms[k], tag)
            else:
                parts.append(atoms[k])
                size += weights[k]
            k += 1
        return k, _tidy(parts), cur
    for atom in atoms[i:end]:
        if tag := _tag(atom):
            _apply(cur, atom, tag)
    closers = [f"</{name}>" for name, _ in reversed(cur)]
    return end, _tidy([o for _, o in stack] + atoms[i:end] + closers), cur


def split_html(html: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """Split Telegram HTML into balanced chunks whose visible text is at most ``limit`` UTF-16
    code units each (see `visible_length`)."""
    if limit < _MIN_LIMIT:
        raise ValueError(f"limit must be at least {_MIN_LIMIT}")
    atoms = _ATOM_RE.findall(html)
    weights = [_weight(atom) for atom in atoms]
    chunks: list[str] = []
    stack: Stack = []
    i = 0
    while i < len(atoms):
        i, chunk, stack = _take(atoms, weights, i, stack, limit)
        if chunk:
            chunks.append(chunk)
    return chunks


def split_plain(text: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """Split plain text into pieces of at most ``limit`` UTF-16 code units, at a line break or
    a space when one is in the second half of a piece; whitespace-only pieces are dropped."""
    if limit < 2:
        raise ValueError("limit must be at least 2")
    pieces: list[str] = []
    start = 0
    while start < len(text):
        end, units = start, 0
        while end < len(text) and units + (w := utf16_length(text[end])) <= limit:
            units += w
            end += 1
        if end < len(text):
            half = start + (end - start) // 2
            cut = max(text.rfind("\n", half, end), text.rfind(" ", half, end))
            end = cut + 1 if cut >= half else end
        pieces.append(text[start:end])
        start = end
    return [piece for piece in pieces if piece.strip()]


def message_chunks(
    text: str, *, plain: bool = False, limit: int = TELEGRAM_LIMIT
) -> list[tuple[str, bool]]:
    """(text, is_html) messages for a reply: Markdown rendered and split, or plain text split,
    each within Telegram's limit as Telegram counts it."""
    text = clean_text(text)  # a lone surrogate would make the whole request fail
    if plain:
        return [(piece, False) for piece in split_plain(text, limit)]
    return [(chunk, True) for chunk in render_chunks(text, limit)]


def too_long(error: str) -> bool:
    """Telegram refused a message for its length ("Bad Request: message is too long")."""
    return any(words in error.lower() for words in ("too long", "too_long"))


def halves(text: str, *, html: bool, floor: int = 256) -> list[str] | None:
    """`text` in pieces of half its size (at least `floor` units) for a message Telegram
    refused as too long after all; None when it is that small already."""
    size = visible_length(text) if html else utf16_length(text)
    if size <= floor:
        return None
    limit = max(floor, -(-size // 2))
    return split_html(text, limit) if html else split_plain(text, limit)


def html_to_plain(html: str) -> str:
    """Drop all tags and unescape entities: the fallback when Telegram rejects our HTML."""
    return unescape(_TAG_RE.sub("", html))


def render_chunks(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """Markdown → Telegram HTML messages, each within ``limit`` (see `split_html`)."""
    return split_html(markdown_to_html(markdown), limit)
