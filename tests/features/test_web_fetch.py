"""web_fetch against a real loopback web server: articles as Markdown, text, JSON and PDFs,
redirects within and beyond the limit, oversized, compressed, binary and slow answers."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from nanomem.agent import InboundMessage
from nanomem.audience import Sender
from nanomem.features.web import AddressGuard, Web, WebClient, search_provider
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider, call, text
from nanomem.tools import OUTSIDE, ToolRegistry
from tests.conftest import make_app, settings_for
from tests.fakes.web_server import FakeWeb, page, tiny_pdf

FRAME = re.compile(r"<<untrusted ([0-9a-f]{8}) from (\S+)>>\n(.*)\n<<end untrusted \1>>", re.S)


@pytest.fixture(scope="module")
def site() -> Iterator[FakeWeb]:
    with FakeWeb() as server:
        server.serve("/article", page("article.html"))
        yield server


def web(home: Home, **limits: object) -> Fetcher:
    """The feature as `build` makes it, with loopback allowed (the fake web is on 127.0.0.1)."""
    settings = settings_for(home, tools={"web": {"allow_private": True, **limits}}).tools
    client = WebClient(
        AddressGuard(allow_private=True),
        max_bytes=settings.web.max_bytes,
        max_redirects=settings.web.max_redirects,
        timeout_s=settings.web.timeout_s,
    )
    return Fetcher(Web(client, search_provider(settings.web, client), settings.max_output_chars))


class Fetcher:
    """The feature's tools called as the model calls them: through the tool registry."""

    def __init__(self, feature: Web) -> None:
        self.feature = feature
        self.max_output_chars = feature.max_output_chars
        self.registry = ToolRegistry(feature.tools(), max_output_chars=feature.max_output_chars)

    async def web_fetch(self, url: str) -> str:
        return await self.registry.call("web_fetch", json.dumps({"url": url}), OUTSIDE)


def framed(result: str) -> tuple[str, str]:
    """(source, body) of the untrusted block in a tool result."""
    match = FRAME.search(result)
    assert match is not None, result
    return match.group(2), match.group(3)


async def test_an_article_arrives_as_markdown_without_its_chrome(home: Home, site: FakeWeb) -> None:
    source, body = framed(await web(home).web_fetch(site.url("/article")))
    assert source == site.url("/article")
    assert body.startswith("Title: Tide Tables of the North Sea Explained\nURL: ")
    assert "## What the numbers mean" in body  # headings
    assert "| Monday | 06:12 | 12:31 | 3.1 |" in body  # the table, as a Markdown table
    assert (
        "[official list of secondary port corrections](https://tides.example.org/corrections)"
        in body
    )
    for chrome in ("NAV-NEWS", "SIDEBAR-MOST-READ", "FOOTER-IMPRINT", "COOKIE-BANNER", "ADVERT"):
        assert chrome not in body


async def test_text_json_and_pdf_are_read(home: Home, site: FakeWeb) -> None:
    tool = web(home)
    plain = site.serve("/notes.txt", "line one\nline two", "text/plain; charset=utf-8")
    assert framed(await tool.web_fetch(plain))[1].endswith("line one\nline two")
    data = site.serve("/data.json", json.dumps({"a": [1, 2], "b": "ü"}), "application/json")
    assert '"a": [\n    1,\n    2\n  ],\n  "b": "ü"' in framed(await tool.web_fetch(data))[1]
    pdf = site.serve(
        "/paper.pdf", tiny_pdf(["Quarterly report", "Revenue grew 12 percent"]), "application/pdf"
    )
    body = framed(await tool.web_fetch(pdf))[1]
    assert "## Page 1" in body and "Revenue grew 12 percent" in body


async def test_a_binary_is_refused_with_its_type_and_size(home: Home, site: FakeWeb) -> None:
    url = site.serve("/photo.png", b"\x89PNG\r\n\x1a\n" + b"\0" * 40_000, "image/png")
    result = await web(home).web_fetch(url)
    assert result == (
        f"Error: web_fetch {url}: {url} is image/png (40 kB): "
        "only web pages, text, JSON and PDFs are read"
    )


async def test_redirects_are_followed_up_to_the_limit(home: Home, site: FakeWeb) -> None:
    tool = web(home, max_redirects=3)
    source, body = framed(await tool.web_fetch(site.url("/redirect/2")))  # 3 hops
    assert source == site.url("/article")  # the final URL names the block
    assert f"URL: {site.url('/article')}" in body
    result = await tool.web_fetch(site.url("/redirect/3"))  # 4 hops
    assert result.endswith("more than 3 redirects (tools.web.max_redirects)")


async def test_only_http_and_https(home: Home, site: FakeWeb) -> None:
    tool = web(home)
    assert "only http:// and https://" in await tool.web_fetch("file:///etc/passwd")
    hop = site.url("/goto?to=file:///etc/passwd")
    assert "only http:// and https://" in await tool.web_fetch(hop)


async def test_an_oversized_page_is_cut_while_streaming(home: Home, site: FakeWeb) -> None:
    result = await web(home, max_bytes=100_000).web_fetch(site.url("/big?mb=50"))
    assert "[cut: only the first 100000 bytes were read (tools.web.max_bytes)]" in result
    assert framed(result)[1].count("x") < 100_001


async def test_a_compression_bomb_inflates_no_further_than_max_bytes(
    home: Home, site: FakeWeb
) -> None:
    result = await web(home, max_bytes=200_000).web_fetch(site.url("/bomb"))
    assert "only the first 200000 bytes were read" in result


async def test_a_slow_page_hits_the_time_limit(home: Home, site: FakeWeb) -> None:
    result = await web(home, timeout_s=1).web_fetch(site.url("/slow"))
    assert result.endswith("no complete answer within 1 s")


async def test_no_cookie_is_kept_between_requests(home: Home, site: FakeWeb) -> None:
    tool = web(home)
    await tool.web_fetch(site.url("/cookie"))
    assert "cookie: none" in await tool.web_fetch(site.url("/cookie"))


async def test_long_text_is_cut_inside_the_frame(home: Home, site: FakeWeb) -> None:
    url = site.serve("/long.txt", "word " * 20_000, "text/plain")
    tool = web(home)
    result = await tool.web_fetch(url)
    assert len(result) <= tool.max_output_chars
    assert FRAME.search(result) is not None  # the end marker survives the cut
    assert "[cut: the text goes on past tools.max_output_chars" in result


async def test_an_error_page_says_so(home: Home, site: FakeWeb) -> None:
    result = await web(home).web_fetch(site.url("/missing"))
    assert "[the server answered HTTP 404: this is its error page]" in result


async def test_web_fetch_in_a_turn_reaches_the_model_framed(home: Home, site: FakeWeb) -> None:
    """The real app and loop: the tool is offered, its result framed, the prompt explains."""
    model = ScriptedProvider([call("web_fetch", {"url": site.url("/article")}), text("Done.")])
    app = make_app(home, model, tools={"web": {"allow_private": True}})
    await app.loop.handle(InboundMessage("cli", "direct", "read it", Sender("me")))
    system = model.calls[0][0]["content"]
    assert "## Content from outside" in system
    tool_result = model.calls[1][-1]
    assert tool_result["role"] == "tool"
    assert framed(tool_result["content"])[0] == site.url("/article")


async def test_tools_web_enabled_false_leaves_the_tools_out(home: Home) -> None:
    model = ScriptedProvider([text("ok")])
    app = make_app(home, model, tools={"web": {"enabled": False}})
    assert "web_fetch" not in app.tools.names and "web_search" not in app.tools.names
