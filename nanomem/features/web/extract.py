"""What a fetched page says, as text a model reads well: HTML as Markdown (trafilatura,
chosen by measurement: README "The web"), text as is, JSON pretty, PDFs as their text."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nanomem.features.web.client import Page, WebError
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
# Their warnings about odd pages would land on the terminal: nanomem reports what matters.
QUIET = ("trafilatura", "htmldate", "courlan", "justext")


@dataclass(frozen=True)
class Readable:
    title: str | None
    text: str
    kind: str  # "page", "text", "JSON", "PDF"


def is_pdf(page: Page) -> bool:
    return page.content_type == "application/pdf"


def readable(page: Page) -> Readable:
    """The page's text, or WebError naming its type and size when it is not text; a PDF
    is `readable_pdf`'s. Blocking (CPU)."""
    kind = page.content_type
    if kind in HTML or (kind in ("", "application/octet-stream") and _looks_like_html(page)):
        return _html(page)
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


def _quiet() -> None:
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _looks_like_html(page: Page) -> bool:
    head = page.body[:512].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html"))


def _html(page: Page) -> Readable:
    _quiet()
    import trafilatura  # lazily: ~0.15 s, paid at the first page read

    html = page.text()
    text = trafilatura.extract(
        html,
        url=page.url,
        output_format="markdown",
        include_links=True,
        include_tables=True,
        include_images=False,
        include_comments=False,
    )
    if not text:  # too little for the article finder (a link list, an app shell): all its text
        text = trafilatura.html2txt(html) or ""
    metadata = trafilatura.extract_metadata(html, default_url=page.url)
    title = metadata.title if metadata is not None else None
    return Readable(title, text.strip(), "page")


def _json(page: Page) -> Readable:
    try:
        return Readable(
            None, json.dumps(json.loads(page.text()), indent=2, ensure_ascii=False), "JSON"
        )
    except (ValueError, RecursionError):  # cut short or not JSON after all: its text as is
        return Readable(None, page.text(), "text")


async def readable_pdf(page: Page, budget: int, settings: DocumentSettings) -> Readable:
    """A PDF's text, parsed in a confined child process (tools/pdf.py)."""
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
