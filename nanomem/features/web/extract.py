"""What a fetched page says, as text a model reads well: HTML as Markdown (trafilatura,
chosen by measurement: docs/tools.md, "The web"), text as is, JSON pretty, PDFs as their text."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nanomem.features.web.client import Page, WebError
from nanomem.pools import DOCUMENTS
from nanomem.tools import PdfUnreadable, pdf_text

if TYPE_CHECKING:
    from nanomem.config import DocumentSettings

HTML = ("text/html", "application/xhtml+xml")
TEXT = (
    "application/xml",
    "application/javascript",
    "application/x-javascript",
    "application/yaml",
    "application/x-yaml",
    "application/toml",
    "application/x-sh",
)


@dataclass(frozen=True)
class Readable:
    title: str | None
    text: str
    kind: str  # "page", "text", "JSON", "PDF"


async def readable(page: Page, budget: int, settings: DocumentSettings) -> Readable:
    """The page's text (at least `budget` characters of it, when it has them), or WebError
    naming its type and size when it is not text. HTML and PDFs are parsed in a confined
    child process (tools/isolated.py), within tools.documents' limits."""
    kind = page.content_type
    if kind in HTML or (kind in ("", "application/octet-stream") and _looks_like_html(page)):
        return await _html(page, budget, settings)
    if kind == "application/pdf":
        return await _pdf(page, budget, settings)
    return await DOCUMENTS.run(_plain, page)


def _plain(page: Page) -> Readable:
    """Text and JSON (bounded work: one pass over at most tools.web.max_bytes)."""
    kind = page.content_type
    if kind == "application/json" or kind.endswith("+json"):
        return _json(page)
    if kind.startswith("text/") or kind in TEXT or kind.endswith("+xml"):
        return Readable(None, page.text(), "text")
    size = page.length if page.length is not None else len(page.body)
    cut = " or more" if page.cut else ""
    raise WebError(
        f"{page.url} is {kind or 'of an unknown type'} ({_size(size)}{cut}): "
        "only web pages, text, JSON and PDFs are read"
    )


def _looks_like_html(page: Page) -> bool:
    head = page.body[:512].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html"))


async def _html(page: Page, budget: int, settings: DocumentSettings) -> Readable:
    from nanomem.features.web.html_reader import html_text

    found = await html_text(page.text(), page.url, budget, settings)
    if "error" in found:
        raise WebError(f"{page.url} is a page that cannot be read: {found['error']}")
    return Readable(found.get("title"), str(found["text"]), "page")


def _json(page: Page) -> Readable:
    try:
        return Readable(
            None, json.dumps(json.loads(page.text()), indent=2, ensure_ascii=False), "JSON"
        )
    except (ValueError, RecursionError):  # cut short or not JSON after all: its text as is
        return Readable(None, page.text(), "text")


async def _pdf(page: Page, budget: int, settings: DocumentSettings) -> Readable:
    if page.cut:
        raise WebError(
            f"{page.url} is a PDF larger than tools.web.max_bytes ({_size(len(page.body))}); "
            "a PDF cannot be read in part"
        )
    try:
        pdf = await pdf_text(page.body, budget, settings)
    except PdfUnreadable as exc:
        raise WebError(f"{page.url} is a PDF that cannot be read ({exc})") from None
    if not pdf.text:
        if pdf.note:
            return Readable(pdf.title, f"({pdf.note}; no text in the pages read)", "PDF")
        return Readable(pdf.title, "(the PDF has no text layer: it may be scanned images)", "PDF")
    return Readable(pdf.title, f"{pdf.text}\n\n[{pdf.note}]" if pdf.note else pdf.text, "PDF")


def _size(size: int) -> str:
    if size >= 1_000_000:
        return f"{size / 1_000_000:.1f} MB"
    if size >= 1000:
        return f"{size / 1000:.0f} kB"
    return f"{size} bytes"
