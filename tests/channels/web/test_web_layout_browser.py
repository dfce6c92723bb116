"""The pages' shared frame in a real browser: at a phone's width nothing runs off the side and
every page's link is reachable; by keyboard the first Tab offers a way past the header, the
focus is always visible; light and dark follow the system; an expired form says why."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page

from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.browser import PHONE, base_url, log_in, screenshot, web_gateway
from tests.helpers.gateway import GatewayProcess, onboarded

pytestmark = pytest.mark.slow

PAGES = ["Chat", "Memory", "Timeline", "Dream review", "Recall", "Schedules & tasks"]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    home: Home = onboarded(tmp_path_factory, "web-layout")
    with FakeOpenAI() as llm, web_gateway(home, llm) as running:
        yield running


def overflows(page: Page) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth > window.innerWidth"))


def test_at_a_phones_width_every_page_is_a_tap_away(
    browser: Browser, gateway: GatewayProcess
) -> None:
    base = base_url(gateway)
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.goto(f"{base}/login")
    assert not overflows(page)
    screenshot(page, "login-phone")
    log_in(page, base)
    nav = page.get_by_role("navigation", name="Pages")
    for label in PAGES:
        link = nav.get_by_role("link", name=label, exact=True)
        link.scroll_into_view_if_needed()
        box = link.bounding_box()
        assert box is not None and box["height"] >= 30, label  # big enough for a finger
        link.click()
        assert (
            page.get_by_role("link", name=label, exact=True).get_attribute("aria-current") == "page"
        )
        assert not overflows(page), label
    assert page.get_by_role("button", name="Log out").is_visible()
    current = nav.get_by_role("link", name=PAGES[-1], exact=True)
    inside = (
        "el => el.getBoundingClientRect().left >= 0"
        " && el.getBoundingClientRect().right <= innerWidth"
    )
    assert current.evaluate(inside), "the current page's link is scrolled into the row"
    screenshot(page, "header-phone")
    context.close()


def test_by_keyboard_alone(browser: Browser, gateway: GatewayProcess) -> None:
    base = base_url(gateway)
    context = browser.new_context()
    page = context.new_page()
    log_in(page, base)
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to content")
    assert skip.evaluate("el => el === document.activeElement")
    assert skip.is_visible() and skip.bounding_box()["y"] >= 0  # type: ignore[index]
    outline = skip.evaluate("el => getComputedStyle(el).outlineStyle")
    assert outline not in ("none", "")
    page.keyboard.press("Enter")
    assert page.evaluate("location.hash") == "#main"
    page.goto(f"{base}/chat")
    for _ in range(3):  # past the skip link and the brand, into the pages' links
        page.keyboard.press("Tab")
    focused = page.evaluate("document.activeElement.textContent.trim()")
    assert focused == "Chat"
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") != "none"
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    page.wait_for_url(f"{base}/memory")
    context.close()


def test_light_and_dark_follow_the_system(browser: Browser, gateway: GatewayProcess) -> None:
    base = base_url(gateway)
    backgrounds = {}
    for scheme in ("light", "dark"):
        context = browser.new_context(color_scheme=scheme)
        page = context.new_page()
        page.goto(f"{base}/login")
        backgrounds[scheme] = page.evaluate("getComputedStyle(document.body).backgroundColor")
        screenshot(page, f"login-{scheme}")
        context.close()
    assert backgrounds["light"] == "rgb(255, 255, 255)"
    assert backgrounds["dark"] != backgrounds["light"]


def test_an_expired_form_says_why_in_the_page(browser: Browser, gateway: GatewayProcess) -> None:
    """An htmx request refused for its CSRF token (another tab logged out and in again, say):
    the page's notice line says what the server said, as text."""
    base = base_url(gateway)
    context = browser.new_context()
    page = context.new_page()
    log_in(page, base)
    page.evaluate(
        """() => {
        document.body.setAttribute('hx-headers', '{"X-CSRF-Token": "stale"}');
        const button = document.createElement('button');
        button.id = 'probe';
        button.setAttribute('hx-post', '/logout');
        button.textContent = 'probe';
        document.querySelector('main').append(button);
        htmx.process(button);
    }"""
    )
    page.click("#probe")
    notice = page.get_by_role("status")
    notice.wait_for()
    assert notice.inner_text() == "This form has expired: reload the page."
    page.goto(f"{base}/chat")
    assert page.url == f"{base}/chat"  # still logged in: the stale form changed nothing
    context.close()
