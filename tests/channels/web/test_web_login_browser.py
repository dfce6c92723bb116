"""The web app's front door in a real browser: the token logs in, nothing else does."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser

from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.browser import base_url, log_in, screenshot, web_gateway
from tests.helpers.gateway import GatewayProcess, onboarded

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    home: Home = onboarded(tmp_path_factory, "web-login")
    with FakeOpenAI() as llm, web_gateway(home, llm) as running:
        yield running


def test_a_stranger_is_sent_to_the_login_and_a_wrong_token_is_refused(
    browser: Browser, gateway: GatewayProcess
) -> None:
    base = base_url(gateway)
    page = browser.new_page()
    response = page.goto(f"{base}/memory")
    assert page.url == f"{base}/login?next=/memory"
    assert response is not None
    assert "default-src 'self'" in response.headers["content-security-policy"]
    page.get_by_label("Token").fill("not-the-token-at-all-000000")
    page.get_by_role("button", name="Log in").click()
    assert page.get_by_role("alert").inner_text() == "That token is wrong."
    screenshot(page, "login")
    page.goto(f"{base}/memory")
    assert page.url == f"{base}/login?next=/memory"
    page.close()


def test_the_token_logs_in_with_a_strict_cookie(browser: Browser, gateway: GatewayProcess) -> None:
    base = base_url(gateway)
    context = browser.new_context()
    page = context.new_page()
    log_in(page, base)
    (cookie,) = context.cookies()
    assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Strict")
    page.get_by_role("link", name="Memory").click()
    assert page.get_by_role("heading", level=1).inner_text() == "Memory"
    context.close()
