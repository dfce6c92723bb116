"""Issue 30's sibling: a web page built to keep the HTML extractor busy for minutes (a table
of a few hundred thousand cells, under `tools.web.max_bytes`), read by `web_fetch` in a real
turn from a loopback web server. It is parsed in a child process that the time limit kills,
and the model is told why; an ordinary page still reads."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from nanomem.agent import InboundMessage
from nanomem.audience import Sender
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider, call, text
from tests.conftest import make_app
from tests.fakes.web_server import FakeWeb, page

LIMIT_S = 3  # tools.documents.timeout_s
ROW = "<tr>" + "<td>c</td>" * 100 + "</tr>"
TABLE = f"<html><body><table>{ROW * 4800}</table></body></html>"  # 4.9 MB: ~100 s here


@pytest.fixture(scope="module")
def site() -> Iterator[FakeWeb]:
    with FakeWeb() as server:
        server.serve("/table", TABLE)
        server.serve("/article", page("article.html"))
        yield server


async def fetched(home: Home, url: str) -> tuple[str, float]:
    """What `web_fetch` of `url` gave the model in a real turn, and how long the turn took."""
    model = ScriptedProvider([call("web_fetch", {"url": url}), text("Done.")])
    app = make_app(
        home,
        model,
        # Memory to spare: the time limit is the one under test (the table also needs ~1 GB).
        tools={
            "web": {"allow_private": True},
            "documents": {"timeout_s": LIMIT_S, "max_memory_mb": 4096},
        },
    )
    started = time.monotonic()
    message = InboundMessage("cli", "direct", "read it", Sender("me"))
    await asyncio.wait_for(app.loop.handle(message), LIMIT_S + 20)
    return str(model.calls[1][-1]["content"]), time.monotonic() - started


async def test_a_page_that_keeps_the_extractor_busy_is_stopped_at_the_limit(
    home: Home, site: FakeWeb
) -> None:
    result, took = await fetched(home, site.url("/table"))
    assert took < LIMIT_S + 10
    assert f"cannot be read: it could not be read within {LIMIT_S} s" in result
    assert "Traceback" not in result


async def test_an_ordinary_page_reads_as_before(home: Home, site: FakeWeb) -> None:
    result, _ = await fetched(home, site.url("/article"))
    assert "cannot be read" not in result and "# " in result
