"""Telegram's own part of its messages: the rendered HTML (nanomem/text/markdown_html.py's
Telegram subset) split into messages that fit the limit, and what to do when Telegram refuses one.

Telegram's limit counts UTF-16 code units of the visible text (after entity parsing), so that
is what splitting measures: not Python characters, not tags.

Kept free of python-telegram-bot so it stays a pure, easily tested text transformation.
"""

from __future__ import annotations

import re
from html import unescape

from nanomem.text.markdown_html import TELEGRAM_HTML, html_text, render_html
from nanomem.text.measure import utf16_units as utf16_length
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

# Our own HTML is regular: tags never contain '<' or '>' and text is fully escaped, so a
# tokenizer of "tag | entity | single character" is exact; single characters allow hard cuts.
_ATOM_RE = re.compile(r"<[^<>]*>|&(?:#\d+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);|.", re.DOTALL)
_TAG_RE = re.compile(r"<(/?)([A-Za-z][\w-]*)[^<>]*>")
_MIN_LIMIT = 16  # far below any real use; a piece must at least hold one character

Tag = tuple[bool, str]  # (is_closing, name)
Stack = list[tuple[str, str]]  # (name, full opening tag) of currently open elements


def markdown_to_html(markdown: str) -> str:
    """Markdown as Telegram-safe HTML; whitespace-only input gives ``""``."""
    return render_html(markdown, TELEGRAM_HTML)


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
    return html_text(html)


def render_chunks(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """Markdown → Telegram HTML messages, each within ``limit`` (see `split_html`)."""
    return split_html(markdown_to_html(markdown), limit)
