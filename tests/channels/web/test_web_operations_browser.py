"""The Schedules & tasks page in a real browser against the real gateway (Telegram's loopback
fake, the scripted model, real MCP servers over stdio): a schedule the model made is cancelled
and gone from /schedules too, a running task is stopped, parked messages are retried and
dropped, MCP servers are listed with their tools, health and token use are shown; by keyboard
at a phone's width; the XSS corpus wherever the page shows text stays text."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import Browser, Page, expect

from nanomem.agent import parked_in
from nanomem.features.schedules.rules import make_schedule
from nanomem.features.schedules.store import ScheduleStore
from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import wait_until
from tests.helpers.browser import PHONE, base_url, log_in, screenshot
from tests.helpers.gateway import GatewayProcess, break_session, onboarded
from tests.helpers.tasks import USAGE, job_of, said
from tests.helpers.web_chats import fits, say, tab_to, telegram_web_gateway
from tests.helpers.xss import CORPUS, CORPUS_TEXT, watch

pytestmark = pytest.mark.slow

FAKES = Path(__file__).resolve().parents[2] / "fakes"
HOSTILE_TEXTS = CORPUS[:8]  # each the name of a hostile MCP tool


def model(body: dict[str, Any]) -> Step:
    """A chat: "REMIND <text>" schedules it daily at 09:00, "SPAWN <label>: <job>" starts a
    task; a task whose job says HOLD waits for FakeOpenAI.release(), any other ends at once."""
    messages = body["messages"]
    last = messages[-1]
    job = job_of(body)
    if job is not None:
        hold = 0 if "HOLD" in job else None
        return Step("reply", text=f"found: {job}", usage=USAGE, hold_after=hold)
    if last["role"] == "tool":
        return Step.reply(f"done: {last['content']}", usage=USAGE)
    text = said(last)
    if text.startswith("REMIND "):
        return Step.tool_call(
            "schedule", {"text": text.removeprefix("REMIND "), "cron": "0 9 * * *"}
        )
    if spawned := re.fullmatch(r"SPAWN (.+?): (.+)", text, re.S):
        return Step.tool_call("spawn", {"label": spawned[1], "task": spawned[2]})
    return Step.reply(f"chat answer to {text}", usage=USAGE)


@dataclass
class Served:
    gateway: GatewayProcess
    base: str
    home: Home
    telegram: FakeTelegram
    llm: FakeOpenAI


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home: Home = onboarded(tmp_path_factory, "web-operations")
    corpus = home.root.parent / "corpus.json"
    corpus.write_text(json.dumps(HOSTILE_TEXTS))
    python = sys.executable
    servers = {
        "fake": {"command": python, "args": [str(FAKES / "mcp_server.py")], "timeout_s": 30},
        "hostile": {"command": python, "args": [str(FAKES / "mcp_hostile.py"), "xss", str(corpus)]},
        "broken": {"command": "/nonexistent/mcp-files"},
        "spare": {"command": python, "args": [str(FAKES / "mcp_server.py")], "enabled": False},
    }
    env = {
        "NANOMEM_MCP__SERVERS": json.dumps(servers),
        "NANOMEM_AGENT__RETRY_FIRST_S": "0.3",
        "NANOMEM_AGENT__MAX_ATTEMPTS": "3",
    }
    with FakeTelegram() as telegram, FakeOpenAI() as llm:
        llm.set_fallback(model)
        with telegram_web_gateway(home, telegram, llm, **env) as gateway:
            gateway.wait_for_line(r"mcp fake: ready")
            gateway.wait_for_line(r"mcp hostile: ready")
            try:
                yield Served(gateway, base_url(gateway), home, telegram, llm)
            finally:
                for _ in range(llm.held):
                    llm.release()


def logged_in(browser: Browser, served: Served, **options: Any) -> tuple[Any, Page]:
    context = browser.new_context(**options)
    page = context.new_page()
    log_in(page, served.base)
    return context, page


def test_a_schedule_the_model_made_is_cancelled_and_gone_from_schedules(
    browser: Browser, served: Served
) -> None:
    reply = say(served.telegram, 1001, "REMIND water the plants")
    found = re.search(r"Scheduled ([0-9a-z_-]+)", reply)
    assert found is not None, reply
    schedule = found.group(1)
    context, page = logged_in(browser, served)
    page.get_by_role("link", name="Schedules & tasks").click()
    section = page.get_by_role("region", name="Schedules")
    row = section.get_by_role("row").filter(has_text="water the plants")
    assert "telegram:1001" in row.inner_text() and "09:00" in row.inner_text()
    assert row.get_by_role("link").get_attribute("href") == "/chat/c/telegram%3A1001"
    row.get_by_role("button", name=f"Cancel schedule {schedule}").click()
    status = page.get_by_role("region", name="Schedules").get_by_role("status")
    assert status.inner_text().startswith(f"Cancelled schedule {schedule}")
    assert page.get_by_role("region", name="Schedules").get_by_text("water the plants").count() == 0
    assert say(served.telegram, 1001, "/schedules") == "No schedules in this chat."
    context.close()


def test_a_running_task_is_stopped(browser: Browser, served: Served) -> None:
    held = served.llm.held
    reply = say(served.telegram, 1002, "SPAWN research: HOLD dig through the archive")
    task = re.search(r"started task ([0-9a-f]{4})", reply)
    assert task is not None, reply
    wait_until(lambda: served.llm.held > held, what="the task's model call")
    context, page = logged_in(browser, served)
    page.goto(f"{served.base}/operations")
    row = (
        page.get_by_role("region", name="Background tasks")
        .get_by_role("row")
        .filter(has_text=task.group(1))
    )
    assert "research" in row.inner_text() and "running" in row.inner_text()
    row.get_by_role("button", name=f"Stop task {task.group(1)}").click()
    status = page.get_by_role("region", name="Background tasks").get_by_role("status")
    assert status.inner_text().startswith(f"Stopping task {task.group(1)}")
    told = wait_until(
        lambda: [
            m["text"]
            for m in served.telegram.sent_messages(1002)
            if "was stopped" in str(m.get("text"))
        ],
        what="the chat told its task stopped",
    )
    assert told[0].startswith(f"task {task.group(1)} (research) was stopped")
    # The section redraws itself: the task is shown stopped, with no Stop button.
    row = (
        page.get_by_role("region", name="Background tasks")
        .get_by_role("row")
        .filter(has_text=task.group(1))
    )
    wait_until(lambda: "stopped" in row.inner_text(), what="the section to redraw itself")
    assert row.get_by_role("button").count() == 0
    context.close()


def park(served: Served, chat: int, text: str) -> int:
    """A message whose handling keeps failing (its session file is a directory), parked."""
    before = {p.seq for p in parked_in(served.home.inbox)}
    served.telegram.send_text(chat, text)
    return int(
        wait_until(
            lambda: next((p.seq for p in parked_in(served.home.inbox) if p.seq not in before), 0),
            what=f"{text!r} parked",
        )
    )


def test_parked_messages_are_retried_and_dropped(browser: Browser, served: Served) -> None:
    broken = break_session(served.home, 1003)
    break_session(served.home, 1004)
    kept = park(served, 1003, "please remember the milk")
    dropped = park(served, 1004, "forget this one")
    broken.rmdir()  # mended: a retry now goes through
    context, page = logged_in(browser, served)
    page.goto(f"{served.base}/operations#parked")
    section = page.get_by_role("region", name="Parked messages")
    assert "“please remember the milk”" in section.inner_text()
    section.get_by_role("button", name=f"Retry message #{kept}").click()
    section = page.get_by_role("region", name="Parked messages")
    assert section.get_by_role("status").inner_text() == f"Message #{kept} is tried again now."
    wait_until(
        lambda: any(
            "chat answer to please remember the milk" in str(m.get("text"))
            for m in served.telegram.sent_messages(1003)
        ),
        what="the retried message answered",
    )
    section.get_by_role("button", name=f"Drop message #{dropped}").click()
    section = page.get_by_role("region", name="Parked messages")
    expect(section.get_by_role("status")).to_have_text(
        f"Message #{dropped} was dropped; it will not be answered."
    )
    expect(section).not_to_contain_text("forget this one")
    assert [p.seq for p in parked_in(served.home.inbox) if p.seq in (kept, dropped)] == []
    context.close()


def test_mcp_servers_health_and_token_use_are_shown(browser: Browser, served: Served) -> None:
    say(served.telegram, 1005, "hello")  # a turn's tokens for the chart
    context, page = logged_in(browser, served)
    page.goto(f"{served.base}/operations")
    mcp = page.get_by_role("region", name="MCP servers")
    fake = mcp.get_by_role("article").filter(has=page.get_by_role("heading", name="fake"))
    assert fake.get_by_role("heading").inner_text() == "fake running"
    tools = fake.get_by_role("listitem").all_inner_texts()
    assert any(t.startswith("echo") for t in tools) and any(t.startswith("add") for t in tools)
    broken = mcp.get_by_role("article").filter(has=page.get_by_role("heading", name="broken"))
    wait_until(lambda: "failed" in broken.inner_text(), what="the broken server failed")
    assert "failed (command not found: /nonexistent/mcp-files)" in broken.inner_text()
    spare = mcp.get_by_role("article").filter(has=page.get_by_role("heading", name="spare"))
    assert spare.get_by_role("heading").inner_text() == "spare off"
    health = page.get_by_role("region", name="Health")
    row = health.get_by_role("row").filter(has_text="telegram")
    assert row.get_by_role("cell").nth(1).inner_text() == "up"
    usage = page.get_by_role("region", name="Token use")
    assert usage.locator("svg").count() == 2
    bars = usage.locator("svg rect title").all_text_contents()
    assert "telegram:1005: 12400.0 tokens" in bars  # the chat's bar, as the turn reported
    (chat,) = usage.get_by_role("row").filter(has_text="telegram:1005").all()
    # chat, calls, tokens, cost: the scripted turn's one call and its reported tokens
    assert chat.get_by_role("cell").all_inner_texts()[:3] == ["telegram:1005", "1", "12,400"]
    screenshot(page, "operations")
    context.close()


def test_a_schedule_is_cancelled_by_keyboard_alone_at_a_phones_width(
    browser: Browser, served: Served
) -> None:
    store = ScheduleStore(served.home.schedules, served.home.lock("schedules"))
    made = make_schedule(
        "telegram:1006",
        "stretch your legs",
        at=None,
        every_minutes=90,
        cron=None,
        zone=ZoneInfo("UTC"),
        now=datetime.now(UTC),
    )
    store.add(made)  # the store's own function, as the schedule tool calls it
    context, page = logged_in(browser, served, viewport=PHONE)
    page.goto(f"{served.base}/operations")
    assert fits(page)
    tab_to(page, f"#cancel-{made.id}")
    # The section redraws itself meanwhile (a new button in the old one's place): the focus
    # stays on the button, which htmx finds again by its id.
    button = f"#cancel-{made.id}"
    page.evaluate("(s) => { document.querySelector(s).dataset.before = 'redraw' }", button)
    page.wait_for_function("(s) => !document.querySelector(s).dataset.before", arg=button)
    assert page.evaluate("document.activeElement.id") == f"cancel-{made.id}"
    page.keyboard.press("Enter")
    status = page.get_by_role("region", name="Schedules").get_by_role("status")
    assert status.inner_text().startswith(f"Cancelled schedule {made.id}")
    assert store.get(made.id) is None
    context.close()


def test_hostile_text_everywhere_on_the_page_stays_text(browser: Browser, served: Served) -> None:
    store = ScheduleStore(served.home.schedules, served.home.lock("schedules"))
    store.add(
        make_schedule(
            "telegram:1007",
            CORPUS_TEXT,
            at=None,
            every_minutes=60,
            cron=None,
            zone=ZoneInfo("UTC"),
            now=datetime.now(UTC),
        )
    )
    # One paragraph: a chat's words and a task's job are read after the runtime's blank line.
    reply = say(served.telegram, 1007, f"SPAWN {CORPUS[1]}: {' '.join(CORPUS)}")
    assert "started task" in reply
    wait_until(
        lambda: any("found:" in str(m.get("text")) for m in served.telegram.sent_messages(1007)),
        what="the task's result",
    )
    break_session(served.home, 1008)
    park(served, 1008, CORPUS_TEXT)
    context, page = logged_in(browser, served)
    watched = watch(context, page)
    page.goto(f"{served.base}/operations")
    main = page.get_by_role("main")
    assert CORPUS[0] in page.get_by_role("region", name="Schedules").inner_text()
    tasks = page.get_by_role("region", name="Background tasks").inner_text()
    assert CORPUS[1] in tasks and f"found: {CORPUS[0]}" in tasks
    assert (
        "“<script>alert(1)</script>"
        in page.get_by_role("region", name="Parked messages").inner_text()
    )
    hostile = (
        page.get_by_role("region", name="MCP servers")
        .get_by_role("article")
        .filter(has=page.get_by_role("heading", name="hostile"))
    )
    names = hostile.locator("li code").all_inner_texts()
    assert names == HOSTILE_TEXTS
    assert "{{7*7}}" in page.get_by_role("region", name="Schedules").inner_text()
    assert main.locator("script, img, iframe, form[action^='http']").count() == 0
    # Each section redrawn once by htmx, the hostile text swapped in as the server sent it.
    for section in ("schedules", "tasks", "mcp", "parked"):
        with page.expect_response(lambda r, s=section: r.url.endswith(f"/operations/{s}")):
            pass
    assert main.locator("script, img, iframe, form[action^='http']").count() == 0
    watched.assert_clean()
    context.close()
