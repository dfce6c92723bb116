"""50 web chats at once through the real `nanomem gateway`: each posts a message and streams
its reply over Server-Sent Events, as an open Chat page does, against a 500 ms model in a
process of its own; Telegram's 50 chats through the same gateway code in the same run, for
comparison (bench_gateway.py's burst, 50 chats).

The browser sessions are 50 aiohttp clients, each logged in as the page is, holding its
conversation's event stream (`/chat/c/<key>/events`) and posting to `/send` with the CSRF
token: 50 Chromium pages on 2 cores shared with other work measure the browser's rendering
more than the gateway, and the page's own work per piece is one text node appended.

Measured per burst: the wall time from the 50 posts until every page has its whole reply
(the session's messages pushed to it), and each page's first text after the model's first
token: from the moment the fake model (in this process, so its clock is ours) has waited out
its 500 ms for that chat's request and writes its first piece, to that piece on the page's
stream. Median of the bursts after a warm-up; p50 and p95 over every page of every burst.
Telegram's row runs against the same fake model.

`--browsers` adds the issue's own measure beside: 50 real Chromium pages (one browser, one
login, a context per page: a context keeps six connections to a host and an open Chat page
holds one), each typing its message into the Chat page and waiting for the streamed reply in
its DOM; first text is when the page's reply first has words (Playwright's poll, every 10 ms,
is in it), the wall until every page shows the saved reply. The verdict is the gateway's (the
SSE row): 50 renderers on two shared cores measure the machine more than the server.

    python tests/benchmarks/bench_web.py [--runs N] [--chats N] [--no-telegram] [--browsers]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common  # before any nanomem import: repository root on sys.path, litellm offline
import aiohttp
import bench_gateway

from tests.fakes.openai_server import FakeOpenAI, Step, echo_step
from tests.fakes.telegram_server import FakeTelegram

LATENCY = 0.5
TOKEN = "nm-web-token-for-the-benchmark-0123"
TARGET_WALL = 1.5  # seconds until all 50 pages have their reply
TARGET_FIRST_MS = 100.0  # the first text after the model's first token, p50
# Long enough that pieces show while the model writes: the core holds back the end of a
# growing text by the longest known secret (the web token here).
SAID = "Tell me about the weather today, in a long and careful answer. " * 4
MARK = re.compile(r"chat-(bench[0-9a-f]{12})")


class Model:
    """The echoing model, noting when each web chat's request came (its first token is
    written LATENCY later)."""

    def __init__(self) -> None:
        self.asked: dict[str, float] = {}

    def __call__(self, request: dict[str, Any]) -> Step:
        if found := MARK.search(json.dumps(request["messages"][-1])):
            self.asked.setdefault(found.group(1), time.perf_counter())
        return echo_step(request)


def start_gateway(home: Path, model_url: str) -> tuple[subprocess.Popen[str], int]:
    env = _common.gateway_env(
        home, model_url, NANOMEM_WEB__ENABLED="true", NANOMEM_WEB__TOKEN=TOKEN
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "nanomem", "gateway"],
        env=env,
        cwd=_common.REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            port = json.loads((home / "gateway.json").read_text()).get("port")
        except (OSError, ValueError):
            port = None
        if port:
            return process, int(port)
        time.sleep(0.1)
    process.kill()
    raise TimeoutError("the gateway never said its port")


class Browser:
    """One logged-in owner's session: its cookie and CSRF token."""

    def __init__(self, http: aiohttp.ClientSession, base: str, model: Model) -> None:
        self.http, self.base, self.model = http, base, model
        self.cookie = self.csrf = ""

    async def log_in(self) -> None:
        async with self.http.post(
            f"{self.base}/login", data={"token": TOKEN}, allow_redirects=False
        ) as response:
            self.cookie = response.headers["Set-Cookie"].split(";", 1)[0]
        async with self.http.get(
            f"{self.base}/chat/c/web%3Awarmupchat", headers={"Cookie": self.cookie}
        ) as response:
            found = re.search(r'data-csrf="([0-9a-f]+)"', await response.text())
        assert found is not None
        self.csrf = found.group(1)

    async def chat(self, key: str, ready: asyncio.Event, go: asyncio.Event) -> float:
        """Seconds from the model's first token to the first text on the page, of one message
        in conversation `key`, its stream open before anything is sent."""
        url = f"{self.base}/chat/c/web%3A{key}"
        headers = {"Cookie": self.cookie}
        async with self.http.get(f"{url}/events?after=0", headers=headers) as stream:
            ready.set()
            await go.wait()
            form = aiohttp.FormData({"text": f"{SAID} chat-{key}"})
            posting = self.http.post(
                f"{url}/send", data=form, headers={**headers, "X-CSRF-Token": self.csrf}
            )
            async with posting as posted:
                assert posted.status == 204, await posted.text()
            first = None
            event = ""
            async for raw in stream.content:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event in ("delta", "messages"):
                    if first is None and (event == "delta" or "msg reply" in line):
                        first = time.perf_counter()
                    if event == "messages" and "msg reply" in line:
                        assert first is not None
                        return first - (self.model.asked[key] + LATENCY)
        raise ConnectionError("the stream ended before the reply")


async def burst(browser: Browser, chats: int) -> tuple[float, list[float]]:
    keys = [f"bench{secrets.token_hex(6)}" for _ in range(chats)]
    readies = [asyncio.Event() for _ in keys]
    go = asyncio.Event()
    tasks = [
        asyncio.create_task(browser.chat(key, ready, go))
        for key, ready in zip(keys, readies, strict=True)
    ]
    for ready in readies:
        await ready.wait()
    started = time.perf_counter()
    go.set()
    done = await asyncio.wait_for(asyncio.gather(*tasks), 120)
    wall = time.perf_counter() - started
    return wall, [first * 1000 for first in done]


async def web_session(
    model: Model, model_url: str, tmp: Path, args: argparse.Namespace
) -> list[tuple[float, list[float]]]:
    home = Path(tempfile.mkdtemp(dir=tmp)) / "home"
    gateway, port = start_gateway(home, model_url)
    try:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as http:
            browser = Browser(http, f"http://127.0.0.1:{port}", model)
            await browser.log_in()
            await burst(browser, 1)  # the first turn loads what is lazy
            return [await burst(browser, args.chats) for _ in range(args.runs)]
    finally:
        gateway.terminate()
        gateway.wait(timeout=60)


FIRST_TEXT = (
    "() => !!document.querySelector('#messages .msg.reply .text, #messages .msg.reply .md')"
)
SAVED = "() => !!document.querySelector('#messages .msg.reply:not(.live)')"


async def page_chat(page: Any, key: str, model: Model) -> float:
    """Seconds from the model's first token to the first words of the reply in the page."""
    box = page.get_by_label("Message")
    await box.fill(f"{SAID} chat-{key}")
    await box.press("Enter")
    await page.wait_for_function(FIRST_TEXT, polling=10, timeout=120_000)
    first = time.perf_counter()
    await page.wait_for_function(SAVED, polling=50, timeout=120_000)
    return first - (model.asked[key] + LATENCY)


async def page_burst(
    chromium: Any, cookies: list[Any], base: str, model: Model, chats: int
) -> tuple[float, list[float]]:
    """A context per page: Chromium keeps six connections per host in a context, and each
    open Chat page holds one for its event stream, so a seventh page of one context would
    wait for a connection (a person's seventh tab too: docs/web.md)."""
    keys = [f"bench{secrets.token_hex(6)}" for _ in range(chats)]
    contexts = [await chromium.new_context() for _ in keys]
    try:
        pages = []
        for context in contexts:
            await context.add_cookies(cookies)  # the one login's cookie
            pages.append(await context.new_page())
        await asyncio.gather(
            *(p.goto(f"{base}/chat/c/web%3A{k}") for p, k in zip(pages, keys, strict=True))
        )
        await asyncio.sleep(1.0)  # each page's event stream open before anything is sent
        started = time.perf_counter()
        done = await asyncio.gather(
            *(page_chat(p, k, model) for p, k in zip(pages, keys, strict=True))
        )
        wall = time.perf_counter() - started
    finally:
        for context in contexts:
            await context.close()
    return wall, [first * 1000 for first in done]


async def browser_session(
    model: Model, model_url: str, tmp: Path, args: argparse.Namespace
) -> list[tuple[float, list[float]]]:
    from playwright.async_api import async_playwright

    from tests.helpers.browser import ARGS, chromium_executable

    home = Path(tempfile.mkdtemp(dir=tmp)) / "home"
    gateway, port = start_gateway(home, model_url)
    base = f"http://127.0.0.1:{port}"
    try:
        async with async_playwright() as playwright:
            chromium = await playwright.chromium.launch(
                executable_path=chromium_executable(), args=ARGS
            )
            context = await chromium.new_context()
            login = await context.new_page()
            await login.goto(f"{base}/login")
            await login.get_by_label("Token").fill(TOKEN)
            await login.get_by_role("button", name="Log in").click()
            await login.wait_for_url(f"{base}/chat")
            cookies = await context.cookies()
            await page_burst(chromium, cookies, base, model, 1)  # the first turn loads the lazy
            found = [
                await page_burst(chromium, cookies, base, model, args.chats)
                for _ in range(args.runs)
            ]
            await chromium.close()
            return found
    finally:
        gateway.terminate()
        gateway.wait(timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--no-telegram", action="store_true", help="the web chats alone")
    parser.add_argument("--browsers", action="store_true", help="50 Chromium pages too")
    args = parser.parse_args()
    model = Model()
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAI(model_latency=LATENCY) as fake_model:
        fake_model.set_fallback(model)
        bursts = asyncio.run(web_session(model, fake_model.base_url, Path(tmp), args))
        pages: list[tuple[float, list[float]]] = []
        if args.browsers:
            pages = asyncio.run(browser_session(model, fake_model.base_url, Path(tmp), args))
        telegram: list[tuple[float, float]] = []
        if not args.no_telegram:
            with FakeTelegram() as fake:
                same = argparse.Namespace(chats=args.chats, runs=args.runs, env=[], profile=None)
                repo = _common.REPO
                url = fake_model.base_url
                telegram = bench_gateway.session(Path(tmp), url, fake, same, repo)
    walls = [wall for wall, _ in bursts]
    firsts = [ms for _, each in bursts for ms in each]
    wall = _common.median(walls)
    p50, p95 = _common.percentile(firsts, 0.5), _common.percentile(firsts, 0.95)
    print(f"### {args.chats} chats at once, model latency {LATENCY * 1000:.0f} ms\n")
    headers = ["channel", "wall s (median)", "wall s (runs)", "first text p50 ms", "p95 ms"]
    rows = [
        [
            "web (SSE)",
            f"{wall:.3f}",
            ", ".join(f"{w:.3f}" for w in walls),
            f"{p50:.0f}",
            f"{p95:.0f}",
        ]
    ]
    if pages:
        page_walls = [w for w, _ in pages]
        page_firsts = [ms for _, each in pages for ms in each]
        rows.append(
            [
                "web (Chromium pages)",
                f"{_common.median(page_walls):.3f}",
                ", ".join(f"{w:.3f}" for w in page_walls),
                f"{_common.percentile(page_firsts, 0.5):.0f}",
                f"{_common.percentile(page_firsts, 0.95):.0f}",
            ]
        )
    if telegram:
        tg = [w for w, _ in telegram]
        runs = ", ".join(f"{w:.3f}" for w in tg)
        rows.append(["telegram", f"{_common.median(tg):.3f}", runs, "—", "—"])
    print(_common.table(headers, rows))
    ok = wall <= TARGET_WALL and p50 <= TARGET_FIRST_MS
    print(
        f"\n{_common.verdict(ok)}: every reply in {wall:.3f} s (≤ {TARGET_WALL} s); first text "
        f"{p50:.0f} ms after the model's first token at p50 (≤ {TARGET_FIRST_MS:.0f} ms)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
