"""A loopback web for the web tools: pages, redirects, oversized and slow answers, and the
search providers (DuckDuckGo's HTML page, Brave, Tavily, SearXNG) in their real response
shapes. It runs in a thread of its own, so a test may call it from a subprocess's turn too."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

PAGES = Path(__file__).parent / "pages"
BRAVE_KEY = "brave-test-key-0123456789abcdef"
TAVILY_KEY = "tvly-test-key-0123456789abcdef"


def page(name: str) -> bytes:
    """A fixture page written for these tests (tests/fakes/pages/)."""
    return (PAGES / name).read_bytes()


def tiny_pdf(lines: list[str]) -> bytes:
    """A one-page PDF whose text layer holds `lines` (built by hand: no writer library)."""
    text = "".join(
        f"BT /F1 12 Tf 72 {720 - 16 * n} Td ({line}) Tj ET\n" for n, line in enumerate(lines)
    ).encode()
    return pdf_file(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>",
            b"<< /Length %d >>\nstream\n" % len(text) + text + b"endstream",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        ]
    )


def poisoned_pdf(pages: int = 2000, content_bytes: int = 1_000_000) -> bytes:
    """The attack of issue 30: `pages` pages sharing one compressed content stream of
    `content_bytes` of empty text runs (~300 kB on disk). pypdf's text extraction parses
    the whole stream again for every page (~1 s each here), finding no text, so a budget
    of characters never trips: about an hour of CPU in all."""
    run = b"BT /F1 12 Tf 10 10 Td () Tj ET\n"
    packed = zlib.compress(run * (content_bytes // len(run)), 9)
    kids = b" ".join(b"%d 0 R" % (5 + n) for n in range(pages))
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 3 0 R >> >> /Contents 4 0 R >>"
    )
    return pdf_file(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
            b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(packed)
            + packed
            + b"\nendstream",
            *[page] * pages,
        ]
    )


def pdf_file(objects: list[bytes]) -> bytes:
    """A PDF of `objects` (numbered from 1, the first the catalog), with its xref table."""
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def duckduckgo_page(results: list[tuple[str, str, str]]) -> str:
    """DuckDuckGo's HTML endpoint as it answers a browser without JavaScript: one ad, then
    `div.result` blocks whose links go through its /l/?uddg= redirect."""
    blocks = [
        '<div class="result results_links results_links_deep result--ad ">'
        '<h2 class="result__title"><a class="result__a" href="https://ad.example/">Ad</a></h2>'
        "</div>"
    ]
    for title, url, snippet in results:
        wrapped = f"//duckduckgo.com/l/?uddg={quote(url, safe='')}&amp;rut=abc123"
        blocks.append(
            '<div class="result results_links results_links_deep web-result ">'
            '<div class="links_main links_deep result__body">'
            f'<h2 class="result__title"><a rel="nofollow" class="result__a" href="{wrapped}">'
            f"{title}</a></h2>"
            f'<div class="result__extras"><a class="result__url" href="{wrapped}">{url}</a></div>'
            f'<a class="result__snippet" href="{wrapped}">{snippet}</a>'
            "</div></div>"
        )
    if not results:
        blocks = ['<div class="no-results">No results.</div>']
    return (
        "<!DOCTYPE html><html><head><title>q at DuckDuckGo</title></head><body>"
        '<div id="links" class="results">' + "".join(blocks) + "</div></body></html>"
    )


DDG_BLOCKED = (
    "<html><body><div class='anomaly-modal__title'>Unfortunately, bots use DuckDuckGo too."
    "</div><form id='challenge-form' action='/anomaly.js'></form></body></html>"
)


class FakeResolver(AbstractResolver):
    """A name service that answers from a table: a public-looking name may map to 127.0.0.1
    (DNS rebinding), or to the loopback address the fake web listens on."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.asked: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        if host not in self.table:
            raise OSError(f"no such name: {host}")
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for address in self.table[host]
        ]

    async def close(self) -> None:
        return None


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class FakeWeb:
    """Serves on `host` (any 127.x address) in a thread; `url(path)` names a page."""

    host: str = "127.0.0.1"
    port: int = 0
    search_status: int = 200  # the providers' answer: 401, 429, 500 to test errors
    search_delay_s: float = 0.0
    search_results: list[tuple[str, str, str]] = field(
        default_factory=lambda: [
            ("Nanomem <b>release</b> notes", "https://nanomem.example/releases", "What's new"),
            ("Second result", "https://other.example/page?a=1&b=2", "More <b>text</b> here"),
            ("Third result", "https://third.example/", "The third snippet"),
        ]
    )
    duckduckgo_blocked: bool = False
    duckduckgo_redesigned: bool = False  # a page whose results nanomem cannot find
    requests: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)
    routes: dict[str, tuple[int, str, bytes, dict[str, str]]] = field(default_factory=dict)
    _loop: asyncio.AbstractEventLoop | None = None
    _stop: asyncio.Event | None = None
    _thread: threading.Thread | None = None

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    def serve(
        self,
        path: str,
        body: bytes | str,
        content_type: str = "text/html; charset=utf-8",
        status: int = 200,
        headers: dict[str, str] | None = None,
    ) -> str:
        """Answer GET `path` with `body`; its URL."""
        data = body.encode() if isinstance(body, str) else body
        self.routes[path] = (status, content_type, data, headers or {})
        return self.url(path)

    def __enter__(self) -> FakeWeb:
        ready = threading.Event()
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._serve(ready)), name="fake-web", daemon=True
        )
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("FakeWeb did not start")
        return self

    def __exit__(self, *_: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    async def _serve(self, ready: threading.Event) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        ready.set()
        await self._stop.wait()
        await runner.cleanup()

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append((request.method, request.path_qs, dict(request.headers), body))
        special: dict[str, Handler] = {
            "/html/": self._duckduckgo,
            "/res/v1/web/search": self._brave,
            "/search": self._tavily if request.method == "POST" else self._searxng,
            "/slow": self._slow,
            "/big": self._big,
            "/bomb": self._bomb,
            "/cookie": self._cookie,
        }
        if request.path.startswith("/redirect/"):
            return self._redirect(request)
        if request.path == "/goto":
            raise web.HTTPFound(request.query["to"])
        if request.path in special:
            return await special[request.path](request)
        if request.path in self.routes:
            status, kind, data, headers = self.routes[request.path]
            return web.Response(status=status, body=data, headers={"Content-Type": kind, **headers})
        return web.Response(status=404, text="<html><body><h1>Not found</h1></body></html>")

    def _redirect(self, request: web.Request) -> web.StreamResponse:
        """/redirect/3 → /redirect/2 → … → /redirect/0 → /article."""
        left = int(request.path.rsplit("/", 1)[1])
        raise web.HTTPFound(f"/redirect/{left - 1}" if left > 0 else "/article")

    async def _slow(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        while True:  # a byte now and then, forever: only a total time limit ends it
            await response.write(b".")
            await asyncio.sleep(0.2)

    async def _big(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        for _ in range(int(request.query.get("mb", "50"))):  # never announced: chunked
            await response.write(b"x" * 1_000_000)
        await response.write_eof()
        return response

    async def _bomb(self, request: web.Request) -> web.StreamResponse:
        """100 MB of zeros gzipped to ~100 kB."""
        squeeze = zlib.compressobj(9, zlib.DEFLATED, 31)
        data = b"".join(squeeze.compress(b"\0" * 1_000_000) for _ in range(100))
        data += squeeze.flush()
        return web.Response(
            body=data, headers={"Content-Type": "text/plain", "Content-Encoding": "gzip"}
        )

    async def _cookie(self, request: web.Request) -> web.StreamResponse:
        seen = request.headers.get("Cookie", "none")
        response = web.Response(text=f"cookie: {seen}", content_type="text/plain")
        response.set_cookie("tracker", "abc123")
        return response

    async def _search_gate(self) -> web.Response | None:
        if self.search_delay_s:
            await asyncio.sleep(self.search_delay_s)
        if self.search_status != 200:
            return web.json_response({"error": "scripted"}, status=self.search_status)
        return None

    async def _duckduckgo(self, request: web.Request) -> web.StreamResponse:
        if self.duckduckgo_blocked:
            return web.Response(status=202, text=DDG_BLOCKED, content_type="text/html")
        if (refused := await self._search_gate()) is not None:
            return refused
        if self.duckduckgo_redesigned:
            return web.Response(
                text="<html><body><main>新</main></body></html>", content_type="text/html"
            )
        return web.Response(text=duckduckgo_page(self.search_results), content_type="text/html")

    async def _brave(self, request: web.Request) -> web.StreamResponse:
        """GET /res/v1/web/search?q=&count=, X-Subscription-Token (Brave's Web Search API)."""
        if request.headers.get("X-Subscription-Token") != BRAVE_KEY:
            return web.json_response(
                {"type": "ErrorResponse", "error": {"code": "SUBSCRIPTION_TOKEN_INVALID"}},
                status=401,
            )
        if (refused := await self._search_gate()) is not None:
            return refused
        count = int(request.query.get("count", "20"))
        return web.json_response(
            {
                "type": "search",
                "query": {"original": request.query["q"], "more_results_available": True},
                "web": {
                    "type": "search",
                    "family_friendly": True,
                    "results": [
                        {
                            "type": "search_result",
                            "title": title,
                            "url": url,
                            "description": snippet,
                            "is_source_local": False,
                            "profile": {"name": "Example", "url": url},
                            "language": "en",
                        }
                        for title, url, snippet in self.search_results[:count]
                    ],
                },
                "mixed": {"type": "mixed", "main": []},
            }
        )

    async def _tavily(self, request: web.Request) -> web.StreamResponse:
        """POST /search with {"query", "max_results"}, Authorization: Bearer tvly-… (Tavily)."""
        if request.headers.get("Authorization") != f"Bearer {TAVILY_KEY}":
            return web.json_response({"detail": {"error": "Unauthorized"}}, status=401)
        if (refused := await self._search_gate()) is not None:
            return refused
        asked: dict[str, Any] = json.loads(await request.read())
        return web.json_response(
            {
                "query": asked["query"],
                "follow_up_questions": None,
                "answer": None,
                "images": [],
                "results": [
                    {"title": t, "url": u, "content": s, "score": 0.9, "raw_content": None}
                    for t, u, s in self.search_results[: asked.get("max_results", 5)]
                ],
                "response_time": 1.02,
            }
        )

    async def _searxng(self, request: web.Request) -> web.StreamResponse:
        """GET /search?q=&format=json (SearXNG with the json format enabled)."""
        if request.query.get("format") != "json":
            return web.Response(status=403, text="Forbidden")
        if (refused := await self._search_gate()) is not None:
            return refused
        return web.json_response(
            {
                "query": request.query["q"],
                "number_of_results": 0,
                "results": [
                    {
                        "url": u,
                        "title": t,
                        "content": s,
                        "engine": "duckduckgo",
                        "engines": ["duckduckgo", "brave"],
                        "score": 2.0,
                        "category": "general",
                    }
                    for t, u, s in self.search_results
                ],
                "answers": [],
                "corrections": [],
                "infoboxes": [],
                "suggestions": [],
                "unresponsive_engines": [],
            }
        )
