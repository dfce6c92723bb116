"""A web message survives the gateway's kill -9: stored before the page was told it was
received, answered after the restart, once; the page left open reconnects by itself and is
sent what it missed, once."""

from __future__ import annotations

import concurrent.futures
import re
import signal
import socket
import time
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from nanomem.cli.onboard import onboard
from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.helpers.browser import base_url, log_in, web_gateway
from tests.helpers.gateway import load_session

pytestmark = pytest.mark.slow
ANSWER = "answered after the restart"


def test_a_message_sent_before_a_kill_is_answered_after_the_restart_once(
    browser: Browser, tmp_path: Path
) -> None:
    home = Home(tmp_path / "home")
    onboard(home)
    context = browser.new_context()
    context.set_default_timeout(20_000)
    page = context.new_page()
    with socket.socket() as free:  # one port for both gateways: the open page reconnects to it
        free.bind(("127.0.0.1", 0))
        port = {"NANOMEM_GATEWAY__PORT": str(free.getsockname()[1])}
    with FakeOpenAI() as llm:
        llm.add(Step.reply("never finished, " * 8, hold_after=1))  # the turn hangs, unanswered
        llm.reply(ANSWER)
        first = web_gateway(home, llm, **port)
        try:
            log_in(page, base_url(first))
            page.get_by_role("button", name="New conversation").click()
            page.wait_for_url(re.compile(r".*/chat/c/web(%3A|:).+"))
            path = page.url.split("/chat/c/", 1)[1]
            page.get_by_label("Message").fill("keep this safe")
            page.get_by_role("button", name="Send").click()
            deadline = time.monotonic() + 20
            while llm.held != 1:  # the turn began: the message is stored and in the session
                assert time.monotonic() < deadline, "the model was never asked"
                time.sleep(0.05)
        finally:
            first.stop(signal.SIGKILL)
        llm.release()
        with web_gateway(home, llm, **port) as second:
            assert base_url(second) == base_url(first)
            # The page was never reloaded: its event stream came back by itself.
            expect(page.locator(".msg.reply")).to_contain_text(ANSWER, timeout=20_000)
            expect(page.locator(".msg.person")).to_have_count(1)
            expect(page.locator(".msg.reply")).to_have_count(1)
            page.reload()
            expect(page.locator(".msg.person")).to_have_count(1)
            expect(page.locator(".msg.reply")).to_have_count(1)
    key = "web:" + path.replace("%3A", ":").split(":", 1)[1]
    with concurrent.futures.ThreadPoolExecutor(1) as thread:  # Playwright's loop runs here
        saved = thread.submit(load_session, home, key).result().messages
    assert [m["role"] for m in saved] == ["user", "assistant"]
    assert saved[-1]["content"] == ANSWER
    context.close()
