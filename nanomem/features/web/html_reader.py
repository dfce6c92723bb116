"""A web page's HTML as Markdown (trafilatura, chosen by measurement: docs/tools.md, "The
web"), in a confined child process (tools/isolated.py), within tools.documents' limits: a page
can be built to keep the extractor busy for minutes (5 MB of table cells: ~100 s here), which a
thread could not stop. Run as `python -m nanomem.features.web.html_reader`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from nanomem.tools import emit, serve, titled

if TYPE_CHECKING:
    from nanomem.config import DocumentSettings

# Their warnings about odd pages would land on the terminal: nanomem reports what matters.
QUIET = ("trafilatura", "htmldate", "courlan", "justext")
WHY_STOPPED = {
    "time": "it could not be read within {timeout:g} s",
    "memory": "reading it needed more than {memory} MB of memory",
    "output": "its text went past what can be read of it",
    "shutdown": "reading it was cut short: nanomem was stopping",
}


async def html_text(html: str, url: str, budget: int, settings: DocumentSettings) -> dict[str, Any]:
    """{"title", "text"} of the page, its text cut after `budget` characters; or
    {"error": why it could not be read}."""
    # Here, not at the top: the child runs this module and needs none of it.
    from nanomem.pools import DOCUMENTS
    from nanomem.tools import ChildLimits, run_isolated

    limits = ChildLimits(settings.timeout_s, settings.max_memory_mb, (budget + 1) * 6 + 65536)
    config = {"url": url, "budget": budget}
    ended = await run_isolated(
        "nanomem.features.web.html_reader", config, html.encode(), limits, DOCUMENTS
    )
    found = ended.lines[0] if ended.lines else {}
    if "text" in found and ended.stopped is None:
        return found
    why = WHY_STOPPED.get(ended.stopped or "", "the page reader failed")
    error = found.get("error") or why.format(
        timeout=settings.timeout_s, memory=settings.max_memory_mb
    )
    return {"error": str(error)}


# -- the child's side ----------------------------------------------------------------------


def _read(config: dict[str, Any], data: bytes) -> None:
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    import trafilatura

    html, url, budget = data.decode("utf-8", "replace"), str(config["url"]), int(config["budget"])
    try:
        found = _extract(trafilatura, html, url)
    except MemoryError:
        raise
    except Exception as exc:  # a page the extractor chokes on: said in a few words
        emit({"error": f"the page reader failed ({type(exc).__name__})"})
        return
    emit({"title": titled(found[0]), "text": found[1][: budget + 1]})


def _extract(trafilatura: Any, html: str, url: str) -> tuple[str | None, str]:
    text = trafilatura.extract(
        html,
        url=url,
        output_format="markdown",
        include_links=True,
        include_tables=True,
        include_images=False,
        include_comments=False,
    )
    if not text:  # too little for the article finder (a link list, an app shell): all its text
        text = trafilatura.html2txt(html) or ""
    metadata = trafilatura.extract_metadata(html, default_url=url)
    title = metadata.title if metadata is not None else None
    return (title if isinstance(title, str) else None), text.strip()


if __name__ == "__main__":
    serve(_read)
