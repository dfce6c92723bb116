"""The text of a PDF, page by page: one reading for the documents a chat sends, `read_file`
and `web_fetch`. pypdf is imported only when a PDF comes (it costs ~100 ms)."""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass


class PdfUnreadable(Exception):
    """Broken, encrypted or not a PDF; the message says why in a few words."""


@dataclass(frozen=True)
class PdfText:
    pages: int
    text: str  # "## Page n" blocks; empty when no page has a text layer (scanned images)
    title: str | None = None


def pdf_text(data: bytes, budget: int | None = None) -> PdfText:
    """Each page's text under its number; past `budget` characters the remaining pages are
    not parsed (they would be cut anyway), and a line says which. Blocking (CPU)."""
    logging.getLogger("pypdf").setLevel(logging.ERROR)  # nanomem says what matters
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise PdfUnreadable("it is encrypted")
        count = len(reader.pages)
        title = reader.metadata.title if reader.metadata is not None else None
        blocks: list[str] = []
        size = 0
        for number, page in enumerate(reader.pages, start=1):
            if budget is not None and size > budget:
                blocks.append(f"(pages {number}-{count} not extracted)")
                break
            if text := (page.extract_text() or "").strip():
                blocks.append(f"## Page {number}\n{text}")
                size += len(blocks[-1])
    except PdfUnreadable:
        raise
    except Exception as exc:  # pypdf raises many kinds on a broken file; none reaches the chat
        raise PdfUnreadable(_reason(exc)) from None
    return PdfText(count, "\n\n".join(blocks), title if isinstance(title, str) else None)


def _reason(exc: Exception) -> str:
    text = " ".join(str(exc).split())[:120]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
