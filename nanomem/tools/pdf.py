"""The text of a PDF, page by page: one reading for the documents a chat sends, `read_file`
and `web_fetch`. A PDF is someone else's file, and can be built to keep a parser busy for an
hour in little space: it is read in a confined child process (tools/isolated.py, run as
`python -m nanomem.tools.pdf`), within the limits of `tools.documents`."""

from __future__ import annotations

import io
import logging
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nanomem.tools.confine import emit, serve, titled

if TYPE_CHECKING:
    from nanomem.config import DocumentSettings

PAGE_LINE_BYTES = 64  # a page's JSON line around its text
WHY_STOPPED = {
    "time": "the PDF could not be read within {timeout:g} s",
    "memory": "the PDF needed more than {memory} MB of memory to read",
    "output": "the PDF's text went past what can be read of it",
    "shutdown": "reading the PDF was cut short: nanomem was stopping",
}


class PdfUnreadable(Exception):
    """Broken, encrypted or not a PDF; the message says why in a few words."""


@dataclass(frozen=True)
class PdfText:
    pages: int
    text: str  # "## Page n" blocks; empty when no page has a text layer (scanned images)
    title: str | None = None
    # Why not every page was read (a limit of tools.documents), for the model and the person.
    note: str | None = None


async def pdf_text(data: bytes, budget: int, settings: DocumentSettings) -> PdfText:
    """Each page's text under its number; past `budget` characters the remaining pages are
    not parsed (they would be cut anyway), and a line says which."""
    # Here, not at the top: the child runs this module and needs none of it.
    from nanomem.pools import DOCUMENTS
    from nanomem.text.plural import plural
    from nanomem.tools.isolated import ChildLimits, run_isolated

    limits = ChildLimits(
        settings.timeout_s,
        settings.max_memory_mb,
        (budget + 1) * 6 + settings.max_pages * PAGE_LINE_BYTES + 4096,  # JSON escapes
    )
    config = {
        "budget": budget,
        "max_pages": settings.max_pages,
        "max_decompressed": settings.max_decompressed_mb * 2**20,
    }
    ended = await run_isolated("nanomem.tools.pdf", config, data, limits, DOCUMENTS)
    head = ended.lines[0] if ended.lines and "pages" in ended.lines[0] else None
    if head is None or ended.stopped == "crashed":
        errors = [line["error"] for line in ended.lines if "error" in line]
        if errors:
            raise PdfUnreadable(str(errors[0]))
        why = WHY_STOPPED.get(ended.stopped or "", "the PDF reader failed")
        raise PdfUnreadable(why.format(timeout=settings.timeout_s, memory=settings.max_memory_mb))
    count, blocks, read = int(head["pages"]), [], 0
    for line in ended.lines[1:]:
        if "page" in line:
            read = int(line["page"])
            if text := line.get("text"):
                blocks.append(f"## Page {read}\n{text}")
        elif "skipped" in line:
            first, why = int(line["skipped"]), str(line["why"])
            blocks.append(f"(pages {first}-{count} not extracted{why})")
        elif "error" in line:  # a page it could not parse: what came before stands
            blocks.append(f"(pages {read + 1}-{count} not extracted: {line['error']})")
    note = None
    if ended.stopped is not None:
        why = WHY_STOPPED[ended.stopped].format(
            timeout=settings.timeout_s, memory=settings.max_memory_mb
        )
        note = f"{why}; {read} of {plural(count, 'page')} read"
    title = head.get("title")
    return PdfText(count, "\n\n".join(blocks), title if isinstance(title, str) else None, note)


# -- the child's side ----------------------------------------------------------------------


def _read(config: dict[str, Any], data: bytes) -> None:
    logging.getLogger("pypdf").setLevel(logging.CRITICAL)  # nanomem says what matters
    # Encrypted PDFs are refused, so pypdf needs no cipher: not importing `cryptography`
    # (which it would try first) saves most of its import time in every child.
    sys.modules["cryptography"] = None  # type: ignore[assignment]
    import pypdf

    budget, cap = int(config["budget"]), int(config["max_decompressed"])
    pypdf.overwrite_configuration(  # no one stream decodes past the cap
        zlib_maximum_output_length=cap,
        lzw_maximum_output_length=cap,
        run_length_maximum_output_length=cap,
        brotli_maximum_output_length=cap,
        array_based_stream_maximum_output_length=cap,
        stream_decoding_work_maximum_length=cap,
    )
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            emit({"error": "it is encrypted"})
            return
        count = len(reader.pages)
        title = reader.metadata.title if reader.metadata is not None else None
    except MemoryError:
        raise
    except Exception as exc:  # pypdf raises many kinds on a broken file; none reaches the chat
        emit({"error": _reason(exc)})
        return
    emit({"pages": count, "title": titled(title)})
    size = decoded = 0
    for number in range(1, count + 1):
        if size > budget:
            emit({"skipped": number, "why": ""})
            return
        if number > int(config["max_pages"]):
            emit({"skipped": number, "why": " (tools.documents.max_pages)"})
            return
        try:
            page = reader.pages[number - 1]
            # Pages may share one content stream: each reading of it counts.
            contents = page.get_contents()
            decoded += len(contents.get_data()) if contents is not None else 0
            if decoded > cap:
                emit({"skipped": number, "why": " (tools.documents.max_decompressed_mb)"})
                return
            text = (page.extract_text() or "").strip()[: budget - size + 1]
        except MemoryError:
            raise
        except Exception as exc:
            emit({"error": _reason(exc)})
            return
        emit({"page": number, "text": text})
        size += len(f"## Page {number}\n{text}") if text else 0


def _reason(exc: Exception) -> str:
    text = " ".join(str(exc).split())[:120]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


if __name__ == "__main__":
    serve(_read)
