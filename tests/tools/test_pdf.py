"""A PDF's text, read by the real child process (tools/pdf.py through tools/isolated.py) within
each of tools.documents' limits: decoded content, memory, pages, time."""

from __future__ import annotations

import asyncio
import zlib
from pathlib import Path

from nanomem.config import DocumentSettings
from nanomem.tools import OUTSIDE, ShellTool, pdf_text
from nanomem.tools.isolated import running
from tests.fakes.web_server import pdf_file, poisoned_pdf, tiny_pdf


def bomb(size: int) -> bytes:
    """One page whose content stream inflates to `size` zero bytes (~0.1 % of it on disk)."""
    packed = zlib.compress(b"\0" * size, 9)
    return pdf_file(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
            b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(packed)
            + packed
            + b"\nendstream",
        ]
    )


async def test_an_ordinary_pdf_reads_page_by_page() -> None:
    pdf = await pdf_text(tiny_pdf(["Revenue rose", "Costs fell"]), 1000, DocumentSettings())
    assert (pdf.pages, pdf.text, pdf.note) == (1, "## Page 1\nRevenue rose\nCosts fell", None)
    assert not running()


async def test_decoded_content_past_the_cap_stops_the_reading_saying_which_pages() -> None:
    pdf = await pdf_text(
        poisoned_pdf(pages=5, content_bytes=600_000), 1000, DocumentSettings(max_decompressed_mb=1)
    )
    assert pdf.text == "(pages 2-5 not extracted (tools.documents.max_decompressed_mb))"


async def test_a_stream_that_inflates_past_the_cap_is_not_decoded() -> None:
    pdf = await pdf_text(bomb(200_000_000), 1000, DocumentSettings())
    assert pdf.text.startswith("(pages 1-1 not extracted: LimitReachedError")


async def test_a_pdf_that_needs_more_memory_is_stopped_saying_so() -> None:
    settings = DocumentSettings(max_memory_mb=128, max_decompressed_mb=4096)
    pdf = await pdf_text(bomb(200_000_000), 1000, settings)
    assert pdf.note == "the PDF needed more than 128 MB of memory to read; 0 of 1 page read"


async def test_pages_past_max_pages_are_not_read() -> None:
    pdf = await pdf_text(
        poisoned_pdf(pages=3, content_bytes=100), 1000, DocumentSettings(max_pages=1)
    )
    assert pdf.text == "(pages 2-3 not extracted (tools.documents.max_pages))"


async def test_the_time_limit_keeps_the_pages_read_and_says_why() -> None:
    pdf = await pdf_text(poisoned_pdf(), 1000, DocumentSettings(timeout_s=1))
    assert pdf.pages == 2000 and pdf.note is not None
    assert pdf.note.startswith("the PDF could not be read within 1 s; ")
    assert not running()


async def test_the_shells_sweep_never_takes_a_reader_for_a_commands_leftover(
    tmp_path: Path,
) -> None:
    """Without the sandbox a command ends with a sweep of the children nanomem adopted while it
    ran; a document's reader started meanwhile is nanomem's own and reads on to its limit
    (before, the sweep killed it and the PDF was told as one the reader failed on)."""
    shell = ShellTool(tmp_path, timeout_s=30, max_output_chars=1000, sandbox="off")

    async def reading() -> str | None:
        await asyncio.sleep(0.2)  # started while the command runs
        pdf = await pdf_text(poisoned_pdf(pages=200), 1000, DocumentSettings(timeout_s=3))
        return pdf.note

    ran, note = await asyncio.gather(shell.exec(OUTSIDE, "sleep 1"), reading())
    assert ran.startswith("exit code 0"), ran
    assert note is not None and note.startswith("the PDF could not be read within 3 s; "), note
    assert not running()
