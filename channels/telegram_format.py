"""Markdown → Telegram Bot API HTML (``parse_mode=HTML``), split into messages that fit the limit.

Kept free of python-telegram-bot so it stays a pure, easily tested text transformation.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from html import escape, unescape

from markdown_it import MarkdownIt
from markdown_it.token import Token

__all__ = ["TELEGRAM_LIMIT", "html_to_plain", "markdown_to_html", "render_chunks", "split_html"]

TELEGRAM_LIMIT = 4096

_SAFE_SCHEMES = frozenset({"http", "https", "tg", "mailto", "ftp"})
_SCHEME_RE = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*):")
_LANG_JUNK_RE = re.compile(r"[^\w+#.-]")
# Our own HTML is regular: tags never contain '<' or '>' and text is fully escaped, so a
# tokenizer of "tag | entity | single character" is exact; single characters allow hard cuts.
_ATOM_RE = re.compile(r"<[^<>]*>|&(?:#\d+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);|.", re.DOTALL)
_TAG_RE = re.compile(r"<(/?)([A-Za-z][\w-]*)[^<>]*>")
_INLINE_TAGS = {"strong": "b", "em": "i", "s": "s"}
_MIN_LIMIT = 16  # must hold the longest entity atom (``&#x10FFFF;``)

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


def _take(atoms: list[str], i: int, stack: Stack, limit: int) -> tuple[int, str, Stack]:
    """Pick the best cut after ``atoms[i]``; returns (end index, chunk html, stack at end)."""
    size = sum(len(opening) + len(name) + 3 for name, opening in stack)  # reopen + close tags
    best: list[int | None] = [None] * 4  # last cut by priority: any, space, line, paragraph
    seen_text, prev_text, k = False, "", i
    while k < len(atoms):
        atom = atoms[k]
        tag = _tag(atom)
        grow = len(atom) + (len(tag[1]) + 3 if not tag[0] else -len(atom)) if tag else len(atom)
        if size + grow > limit:
            break
        size += grow
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
        # Tag overhead alone exceeds the limit: degrade this piece to unformatted text.
        parts, size, k = [], 0, i
        while k < len(atoms) and ((tag := _tag(atoms[k])) or size + len(atoms[k]) <= limit):
            if tag:
                _apply(cur, atoms[k], tag)
            else:
                parts.append(atoms[k])
                size += len(atoms[k])
            k += 1
        return k, _tidy(parts), cur
    for atom in atoms[i:end]:
        if tag := _tag(atom):
            _apply(cur, atom, tag)
    closers = [f"</{name}>" for name, _ in reversed(cur)]
    return end, _tidy([o for _, o in stack] + atoms[i:end] + closers), cur


def split_html(html: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """Split Telegram HTML into balanced chunks of at most ``limit`` characters each."""
    if limit < _MIN_LIMIT:
        raise ValueError(f"limit must be at least {_MIN_LIMIT}")
    atoms = _ATOM_RE.findall(html)
    chunks: list[str] = []
    stack: Stack = []
    i = 0
    while i < len(atoms):
        i, chunk, stack = _take(atoms, i, stack, limit)
        if chunk:
            chunks.append(chunk)
    return chunks


def html_to_plain(html: str) -> str:
    """Drop all tags and unescape entities: the fallback when Telegram rejects our HTML."""
    return unescape(_TAG_RE.sub("", html))


def render_chunks(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """Markdown → list of Telegram HTML messages, each at most ``limit`` characters."""
    return split_html(markdown_to_html(markdown), limit)
