"""Chromium through Playwright against the real `nanomem gateway` with the web app on.

The browser is the system's (Debian's `chromium`, which .ci/run installs): Playwright downloads
none. Without one the browser tests skip here, and fail in CI (BROWSER_REQUIRED, set by .ci/run).
Screenshots go to test-output/screenshots/ (or $NANOMEM_SCREENSHOTS) for a person to look at.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.gateway import GatewayProcess

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

WEB_TOKEN = "nm-web-token-for-tests-0123456789"
REQUIRED = "BROWSER_REQUIRED"
REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = Path(os.environ.get("NANOMEM_SCREENSHOTS", REPO / "test-output" / "screenshots"))
# As root Chromium needs --no-sandbox; the rest keeps it off the network it would reach by
# itself (updates, sync, Google's hosts), which a closed network refuses many times over.
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PHONE = {"width": 390, "height": 844}  # a phone's viewport, CSS pixels


def chromium_executable() -> str | None:
    """$NANOMEM_CHROMIUM, else the system's chromium on PATH."""
    if given := os.environ.get("NANOMEM_CHROMIUM"):
        return given
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Playwright's sync API leaves its event loop marked as this thread's running loop between
    its calls, for as long as the session's Chromium is open; an asyncio test run after a
    browser test in the same process (a CI worker runs both) then cannot start its own loop.
    A test that does not use the browser runs with the mark taken off, and put back after."""
    held = asyncio.events._get_running_loop()
    if held is None or "browser" in getattr(item, "fixturenames", ()):
        return (yield)
    asyncio.events._set_running_loop(None)
    try:
        return (yield)
    finally:
        asyncio.events._set_running_loop(held)


# The process's one Chromium. Playwright's sync API cannot start a second while one runs, and
# each conftest or module that imports `browser` makes a fixture of its own: they share this.
_running: list[Browser] = []


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if _running:
        yield _running[0]
        return
    executable = chromium_executable()
    if executable is None:
        message = "no Chromium: apt install chromium (or set NANOMEM_CHROMIUM)"
        if os.environ.get(REQUIRED):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=ARGS)
        _running.append(launched)
        try:
            yield launched
        finally:
            _running.clear()
            launched.close()


def web_gateway(home: Home, llm: FakeOpenAI, **env: str) -> GatewayProcess:
    """The real gateway with the web app on (and no messenger); `env` adds settings."""
    settings = {"NANOMEM_WEB__ENABLED": "true", "NANOMEM_WEB__TOKEN": WEB_TOKEN}
    return GatewayProcess(home, None, llm, **(settings | env))


def base_url(gateway: GatewayProcess) -> str:
    return f"http://127.0.0.1:{gateway.port}"


def log_in(page: Page, base: str, token: str = WEB_TOKEN) -> None:
    """Log in through the login form, as a person would."""
    page.goto(f"{base}/login")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base}/chat")


def screenshot(page: Page, name: str) -> Path:
    """Save the whole page as test-output/screenshots/<name>.png."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
