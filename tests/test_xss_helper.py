"""tests/helpers/xss.py catches what it is for: a page that opens a dialog, reaches another
host, or makes markup the CSP has to block; and the corpus, put into a page as markup, does."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser

from tests.fakes.web_server import FakeWeb
from tests.helpers.browser import browser as browser
from tests.helpers.xss import CORPUS_TEXT, EVIL, Watch, watch

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site() -> Iterator[FakeWeb]:
    with FakeWeb() as served:
        served.serve("/quiet", "<!doctype html><p>{{7*7}} &lt;script&gt;</p>")
        served.serve("/dialog", "<!doctype html><script>alert('caught')</script>")
        served.serve("/outside", f'<!doctype html><img src="{EVIL}/pixel.png">')
        served.serve("/popup", "<!doctype html><script>window.open('/dialog')</script>")
        served.serve(
            "/csp",
            "<!doctype html><script>alert('inline')</script>",
            headers={"Content-Security-Policy": "default-src 'self'"},
        )
        served.serve("/corpus", f"<!doctype html><body>{CORPUS_TEXT}</body>")
        yield served


def visit(browser: Browser, url: str) -> Watch:
    context = browser.new_context()
    page = context.new_page()
    watched = watch(context, page)
    page.goto(url)
    page.wait_for_load_state("networkidle")
    context.close()
    return watched


def test_a_quiet_page_is_clean(browser: Browser, site: FakeWeb) -> None:
    visit(browser, site.url("/quiet")).assert_clean()


def test_a_dialog_is_caught_and_dismissed(browser: Browser, site: FakeWeb) -> None:
    watched = visit(browser, site.url("/dialog"))
    assert watched.dialogs == ["alert: caught"]
    with pytest.raises(AssertionError, match="a dialog opened"):
        watched.assert_clean()


def test_a_request_to_another_host_is_caught_and_never_sent(
    browser: Browser, site: FakeWeb
) -> None:
    watched = visit(browser, site.url("/outside"))
    assert watched.outside == [f"{EVIL}/pixel.png"]
    with pytest.raises(AssertionError, match="another host"):
        watched.assert_clean()


def test_a_page_the_first_one_opens_is_watched_too(browser: Browser, site: FakeWeb) -> None:
    context = browser.new_context()
    page = context.new_page()
    watched = watch(context, page)
    with context.expect_page() as opened:
        page.goto(site.url("/popup"))
    opened.value.wait_for_load_state("load")
    context.close()
    assert watched.dialogs == ["alert: caught"]


def test_what_the_csp_blocks_is_caught(browser: Browser, site: FakeWeb) -> None:
    watched = visit(browser, site.url("/csp"))
    assert watched.dialogs == []
    assert any("script" in report for report in watched.blocked)
    with pytest.raises(AssertionError, match="the CSP blocked"):
        watched.assert_clean()


def test_the_corpus_as_markup_runs_and_reaches_out(browser: Browser, site: FakeWeb) -> None:
    """The corpus is hostile: a page that put it in as markup would open dialogs and reach
    another host, so a page that shows it cleanly shows it as text."""
    watched = visit(browser, site.url("/corpus"))
    assert len(watched.dialogs) >= 3
    assert {url.removeprefix(EVIL) for url in watched.outside} >= {"/x.png", "/frame", "/sheet.css"}
