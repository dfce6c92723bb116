"""The whole web app from outside, after its pages were put together: a stranger on every route
(read from the app) meets the login and changes nothing; a page's own requests after a logout
elsewhere are told so, and the words typed are kept; a session key and a group's words made of
markup stay text in the conversations list, the conversation and Recall, and a group's page
shows nothing of the owner's USER.md."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, expect

from channels.web.auth import CSRF_HEADER, LOGGED_OUT
from channels.web.conversations import conversation_url
from nanomem.home import Home
from nanomem.memory.session import SessionStore
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.browser import WEB_TOKEN, base_url, log_in, web_gateway
from tests.helpers.gateway import GatewayProcess, onboarded
from tests.helpers.web_login import routes
from tests.helpers.xss import CORPUS, watch

pytestmark = pytest.mark.slow
expect.set_options(timeout=20_000)
OPEN = ("/login", "/static")  # the front door and the page's own files: anyone's
PRIVATE = "the owner's private note: allergic to penicillin"
GROUP = "matrix:!<img src=x onerror=alert(1)>:evil.example"
CHANNEL = "slack:<script>alert(1)</script>"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    home: Home = onboarded(tmp_path_factory, "web-review")
    with FakeOpenAI() as llm, web_gateway(home, llm) as running:
        yield running


def state(home: Home) -> dict[str, str]:
    """What a stranger must not change: the memory, the sessions, the schedules and tasks."""
    seen = {}
    for folder in (home.workspace, home.sessions, home.root / "web-files"):
        for path in sorted(folder.rglob("*")) if folder.is_dir() else ():
            if path.is_file() and ".git" not in path.parts:
                seen[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return seen


def test_a_stranger_meets_the_login_on_every_route_and_changes_nothing(
    gateway: GatewayProcess,
) -> None:
    base = base_url(gateway)
    before = state(gateway.home)
    asked = []
    with httpx.Client(base_url=base, follow_redirects=False, timeout=10) as stranger:
        stranger.cookies.set("nanomem_session", "someone.9999999999." + "0" * 64)
        for method, path in routes(gateway.home):
            if path.startswith(OPEN):
                continue
            for headers in ({}, {"Sec-Fetch-Mode": "cors"}, {"HX-Request": "true"}):
                data = {"csrf": "x", "text": "hi", "command": "/stop"}
                sent = {CSRF_HEADER: "x", **headers}
                answer = stranger.request(method, path, headers=sent, data=data)
                asked.append((method, path))
                if headers.get("HX-Request"):
                    assert answer.status_code == 401, (method, path, answer.status_code)
                    assert answer.headers["HX-Redirect"] == "/login"
                elif headers:
                    assert answer.status_code == 401, (method, path, answer.status_code)
                    assert answer.text == ("" if method == "HEAD" else LOGGED_OUT)
                else:
                    assert answer.status_code == 303, (method, path, answer.status_code)
                    assert answer.headers["location"].startswith("/login"), (method, path)
                assert WEB_TOKEN not in answer.text
    assert ("POST", "/chat/new") in asked and ("GET", "/memory") in asked  # routes were read
    assert state(gateway.home) == before


def test_words_typed_after_a_logout_elsewhere_are_kept_and_the_page_says_why(
    browser: Browser, gateway: GatewayProcess
) -> None:
    base = base_url(gateway)
    context = browser.new_context()
    page = context.new_page()
    log_in(page, base)
    page.get_by_role("button", name="New conversation").click()
    page.wait_for_url(f"{base}/chat/c/**")
    other = context.new_page()  # another tab of the same browser
    other.goto(f"{base}/memory")
    other.get_by_role("button", name="Log out").click()
    other.wait_for_url(f"{base}/login")
    page.get_by_label("Message").fill("are you still there?")
    page.get_by_label("Message").press("Enter")
    expect(page.locator("#problem")).to_have_text(LOGGED_OUT)
    expect(page.get_by_label("Message")).to_have_value("are you still there?")
    assert not list(gateway.home.sessions.glob("web_*"))  # nothing was taken
    context.close()


async def _saved(home: Home) -> None:
    store = SessionStore(home.sessions)
    for key, room in ((GROUP, True), (CHANNEL, False)):
        session = await store.get(key)
        await store.mark_room(session, room)
        messages = [{"role": "user", "content": line} for line in CORPUS[:12]]
        messages.append({"role": "assistant", "content": "\n\n".join(CORPUS[12:])})
        await store.append(session, messages)


def test_markup_in_a_session_key_and_a_groups_words_stays_text(
    browser: Browser, gateway: GatewayProcess
) -> None:
    home = gateway.home
    user_md = home.workspace / "USER.md"
    user_md.write_text(Path(user_md).read_text() + f"\n- {PRIVATE}\n")
    with ThreadPoolExecutor(1) as aside:  # Playwright's sync API keeps a loop marked running
        aside.submit(asyncio.run, _saved(home)).result()
    base = base_url(gateway)
    context = browser.new_context()
    page = context.new_page()
    watched = watch(context, page)
    log_in(page, base)
    page.goto(f"{base}/chat")
    expect(page.locator(f'a[href="{conversation_url(GROUP)}"]')).to_be_visible()
    assert page.locator("img[src=x], script:not([src])").count() == 0
    for key in (GROUP, CHANNEL):
        page.goto(base + conversation_url(key))
        expect(page.locator("#messages")).to_contain_text("<script>alert(1)</script>")
        assert PRIVATE not in page.content()
    expect(page.locator(".read-only")).to_contain_text("slack conversation")
    page.goto(base + conversation_url(GROUP))
    expect(page.locator(".read-only")).to_contain_text("a group")
    page.goto(f"{base}/recall?q=alert")
    page.wait_for_load_state("networkidle")
    assert PRIVATE not in page.content()
    watched.assert_clean()
    context.close()


def test_after_all_this_no_secret_is_in_the_log(gateway: GatewayProcess) -> None:
    logs = gateway.logged()
    assert WEB_TOKEN not in "".join(gateway.lines) + logs
    assert "Traceback" not in "".join(gateway.lines) + logs


def test_a_page_that_is_not_there_is_said_in_the_layout_with_the_way_back(
    browser: Browser, gateway: GatewayProcess
) -> None:
    base = base_url(gateway)
    context = browser.new_context()
    page = context.new_page()
    watched = watch(context, page)
    log_in(page, base)
    for path, said in (
        ("/chat/c/telegram%3A999", "No such conversation."),
        ("/chat/c/web%3A%3Cscript%3Ealert(1)%3C%2Fscript%3E", "No such conversation."),
        ("/memory/nowhere", "Not Found"),
    ):
        answer = page.goto(base + path)
        assert answer is not None and answer.status == 404, path
        expect(page.locator("main h1 + p")).to_have_text(said)
        expect(page.get_by_role("link", name="Back to your conversations")).to_be_visible()
        expect(page.get_by_role("button", name="Log out")).to_be_visible()
    page.get_by_role("link", name="Back to your conversations").click()
    page.wait_for_url(f"{base}/chat")
    watched.assert_clean()
    context.close()
    plain = httpx.get(f"{base}/chat/c/telegram%3A999", follow_redirects=False)  # no login
    assert plain.status_code == 303  # a stranger still meets the login first
