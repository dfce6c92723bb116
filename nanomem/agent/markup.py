"""A text longer than a channel takes, split into messages at paragraph, then line, then word
boundaries (`max_chars`)."""

from __future__ import annotations

from nanomem.text.markdown_plain import plain_text

__all__ = ["plain_text", "split_text"]


def split_text(text: str, limit: int) -> list[str]:
    """Messages of at most `limit` characters, cut where a reader would pause: between
    paragraphs, else between lines, else between words, else anywhere."""
    parts: list[str] = []
    rest = text
    while len(rest) > limit:
        window = rest[: limit + 1]
        cut = _last_break(window, limit)
        parts.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip("\n ")
    if rest.strip() or not parts:
        parts.append(rest)
    return [part for part in parts if part] or [text[:limit]]


def _last_break(window: str, limit: int) -> int:
    """Where to cut: the last paragraph break that fits, else line break, else space."""
    for mark in ("\n\n", "\n", " "):
        if (at := window.rfind(mark, 0, limit + 1)) > 0:
            return at
    return limit
