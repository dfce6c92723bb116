"""The Recall page in a real browser against the real gateway: chats made over Telegram (the
loopback fake) and the scripted model are searched, and a result opens its chat at the
message; by keyboard alone, at a phone's width; hostile text in a message stays text."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from playwright.sync_api import Browser, expect

from nanomem.home import Home
from nanomem.memory.history import HistoryStore, NewEntry
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers.browser import PHONE, base_url, log_in, screenshot
from tests.helpers.gateway import GatewayProcess, onboarded
from tests.helpers.web_chats import fits, say, tab_to, telegram_web_gateway
from tests.helpers.xss import CORPUS, CORPUS_TEXT, watch

pytestmark = pytest.mark.slow

CHAT = 1001
ROOM = -1002003004


@dataclass
class Served:
    gateway: GatewayProcess
    base: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home: Home = onboarded(tmp_path_factory, "web-recall")
    with (
        FakeTelegram() as telegram,
        FakeOpenAI() as llm,
        telegram_web_gateway(home, telegram, llm) as gateway,
    ):
        llm.reply("It is in the attic, in the blue box by the window.")
        say(telegram, CHAT, "Where did I leave grandpa's notebook?")
        llm.reply("Noted: the garden key is under the stone.")
        say(telegram, CHAT, "The garden key is under the stone.")
        llm.reply("The ladder is in the shed.")
        say(
            telegram,
            ROOM,
            "@nanomem_test_bot where is the ladder?",
            chat_type="group",
            user_id=1002,
        )
        llm.reply("Shown as text, I hope.")
        say(telegram, CHAT, f"xsscanary {CORPUS_TEXT}")
        history = HistoryStore(home.workspace / "memory", home.lock("history"))
        history.append_sync(
            [
                NewEntry(
                    f"telegram:{CHAT}",
                    "- 2026-03-14: grandpa's notebook is in the attic",
                    "summary",
                ),
                # Consolidation keeps what the chat said, hostile text included.
                NewEntry(f"telegram:{CHAT}", f"- xsscanary {' '.join(CORPUS)}", "summary"),
            ]
        )
        yield Served(gateway, base_url(gateway))


def test_history_is_searched_and_a_result_opens_its_chat_at_the_message(
    browser: Browser, served: Served
) -> None:
    context = browser.new_context()
    page = context.new_page()
    log_in(page, served.base)
    page.get_by_role("link", name="Recall").click()
    page.get_by_label("Search all history").fill("notebook attic")
    page.get_by_role("button", name="Search").click()
    messages = page.get_by_role("region", name="Messages").get_by_role("listitem")
    # The reply has "attic", the question "notebook": both found, the question first (its
    # word is rarer), each a link to its place in the chat.
    links = messages.get_by_role("link")
    assert links.count() == 2
    hrefs = [links.nth(i).get_attribute("href") for i in range(2)]
    assert sorted(hrefs) == [f"/chat/c/telegram%3A{CHAT}#m0", f"/chat/c/telegram%3A{CHAT}#m1"]
    assert "attic" in [m.lower() for m in messages.locator("mark").all_inner_texts()]
    summaries = page.get_by_role("region", name="Summaries").get_by_role("listitem")
    assert summaries.count() == 1
    assert "summary" in summaries.inner_text()
    assert summaries.get_by_role("link").get_attribute("href") == f"/chat/c/telegram%3A{CHAT}"
    screenshot(page, "recall")
    target = links.nth(hrefs.index(f"/chat/c/telegram%3A{CHAT}#m1"))
    target.click()
    page.wait_for_url(f"{served.base}/chat/c/telegram%3A{CHAT}#m1")
    # The chat page opens at that message: the reply the search found.
    expect(page.locator("#m1")).to_contain_text("It is in the attic")
    assert page.locator("#m1").is_visible()
    context.close()


def test_a_group_rooms_messages_are_labelled_as_the_rooms(browser: Browser, served: Served) -> None:
    page = browser.new_page()
    log_in(page, served.base)
    page.goto(f"{served.base}/recall?q=ladder")
    found = page.get_by_role("region", name="Messages").get_by_role("listitem")
    assert found.count() == 2
    assert sorted(found.all_inner_texts()[i].split(" · ")[2].split("\n")[0] for i in range(2)) == [
        "a member",
        "the assistant",
    ]
    for i in range(2):
        assert "group room" in found.nth(i).inner_text()
        assert found.nth(i).get_by_role("link").inner_text() == f"telegram:{ROOM}"
    page.goto(f"{served.base}/recall?q=notebook")
    assert "group room" not in page.get_by_role("region", name="Messages").inner_text()
    page.close()


def test_a_search_by_keyboard_alone_at_a_phones_width(browser: Browser, served: Served) -> None:
    context = browser.new_context(viewport=PHONE)
    page = context.new_page()
    log_in(page, served.base)
    page.goto(f"{served.base}/recall")
    tab_to(page, "#recall-q")
    page.keyboard.type("garden key")
    page.keyboard.press("Enter")
    page.wait_for_url(f"{served.base}/recall?q=garden+key")
    tab_to(page, "li.result a")
    focused = page.evaluate("document.activeElement.getAttribute('href')")
    assert focused.startswith(f"/chat/c/telegram%3A{CHAT}#m")
    assert fits(page)
    page.keyboard.press("Enter")
    page.wait_for_url(f"{served.base}{focused}")
    anchor = "#" + focused.partition("#")[2]
    expect(page.locator(anchor)).to_contain_text("garden key")
    context.close()


def test_hostile_text_in_a_searched_message_stays_text(browser: Browser, served: Served) -> None:
    context = browser.new_context()
    page = context.new_page()
    watched = watch(context, page)
    log_in(page, served.base)
    for query in ["xsscanary", "script alert", "evil example", "javascript", "7"]:
        page.goto(f"{served.base}/recall?q={query.replace(' ', '+')}")
        assert page.get_by_role("region", name="Messages").get_by_role("listitem").count() >= 1
    page.goto(f"{served.base}/recall?q=xsscanary")
    shown = page.locator("li.result p.snippet").first.inner_text()
    assert "xsscanary <script>alert(1)</script>" in shown
    summary = page.get_by_role("region", name="Summaries").locator("p.snippet").inner_text()
    assert summary.startswith("- xsscanary <script>alert(1)</script> <img src=x onerror")
    assert page.locator("li.result script, li.result img, li.result svg").count() == 0
    watched.assert_clean()
    context.close()
