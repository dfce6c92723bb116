"""A reminder made in `nanomem chat` (a pseudo-terminal) fires through the real `nanomem gateway`
(a subprocess) on the same home: live in the open chat when a gateway runs, and, made while
none ran, at the gateway's start and shown by the next chat as "While you were away"
(issue 31, slip 5)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pexpect
import pytest

from nanomem.home import Home
from nanomem.memory.session import session_filename
from tests.conftest import cli_env
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.helpers import WAIT_S, wait_until
from tests.helpers.gateway import GatewayProcess
from tests.helpers.terminal import PROMPT


def model(request: dict[str, Any]) -> Step:
    last = request["messages"][-1]
    if last["role"] == "tool":
        return Step.reply(f"tool: {last['content']}")
    text = str(last["content"])
    if "[scheduled trigger" in text:
        return Step.reply("REMINDER: " + text.rsplit("\n", 1)[-1])
    if found := re.search(r"REMIND IN (\d+) (.+)", text):
        at = datetime.now(UTC) + timedelta(seconds=int(found.group(1)))
        return Step.tool_call("schedule", {"text": found.group(2), "at": at.isoformat()})
    return Step.reply("plain answer")


@pytest.fixture
def llm(fake_llm: FakeOpenAI) -> FakeOpenAI:
    fake_llm.set_fallback(model)
    return fake_llm


def open_chat(home: Home, llm: FakeOpenAI) -> pexpect.spawn:
    child = pexpect.spawn(
        sys.executable,
        ["-m", "nanomem", "chat"],
        env=cli_env(home, llm, TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1"),
        encoding="utf-8",
        timeout=WAIT_S,
        dimensions=(40, 200),
    )
    return child


@pytest.fixture
def gateway(home: Home, llm: FakeOpenAI) -> Iterator[GatewayProcess]:
    with GatewayProcess(home, None, llm) as process:
        yield process


def last_assistant(home: Home) -> str:
    path = home.sessions / session_filename("cli:direct")
    lines = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    said = [m["content"] for m in lines if m.get("role") == "assistant" and m.get("content")]
    return str(said[-1]) if said else ""


def test_a_reminder_made_in_the_terminal_fires_live_through_the_gateway(
    home: Home, llm: FakeOpenAI, gateway: GatewayProcess
) -> None:
    chat = open_chat(home, llm)
    chat.expect_exact(PROMPT)
    chat.sendline("REMIND IN 2 stretch your legs")
    chat.expect_exact("tool: Scheduled")
    chat.expect_exact("The gateway running on this home")
    chat.expect_exact(PROMPT)
    schedules = json.loads(home.schedules.read_text())["schedules"]
    assert [s["session"] for s in schedules] == ["cli:direct"]
    gateway.wait_for_line(r"schedule [0-9a-f]{8} \(cli:direct\) taken up")
    chat.expect_exact("REMINDER: stretch your legs")  # shown while the chat is open
    chat.expect_exact(PROMPT)
    assert last_assistant(home) == "REMINDER: stretch your legs"  # and in the session
    wait_until(lambda: not home.schedules.read_text().count("cli:direct"), what="a spent once")
    chat.sendcontrol("d")
    chat.expect(pexpect.EOF)
    reopened = open_chat(home, llm)  # shown once: not again at the next start
    reopened.expect_exact(PROMPT)
    reopened.sendline("hello")
    reopened.expect_exact("plain answer")
    assert "While you were away" not in reopened.before
    reopened.sendcontrol("d")
    reopened.expect(pexpect.EOF)


def test_a_reminder_made_with_no_gateway_fires_when_one_starts_and_waits_for_the_chat(
    home: Home, llm: FakeOpenAI
) -> None:
    chat = open_chat(home, llm)
    chat.expect_exact(PROMPT)
    chat.sendline("REMIND IN 1 water the basil")
    chat.expect_exact("no gateway runs on this home to fire it")
    chat.expect_exact("nanomem gateway")  # drawn as code: what to start
    chat.expect_exact(PROMPT)
    chat.sendcontrol("d")
    chat.expect(pexpect.EOF)
    (made,) = json.loads(home.schedules.read_text())["schedules"]
    assert made["text"] == "water the basil"
    due = datetime.fromisoformat(made["at"])
    wait_until(lambda: datetime.now(UTC) > due + timedelta(seconds=1), what="its time to pass")
    with GatewayProcess(home, None, llm) as process:  # after its time: caught up at start
        process.wait_for_line(r"while the gateway was down; running it now")
        wait_until(lambda: last_assistant(home) == "REMINDER: water the basil", what="the turn")
    chat = open_chat(home, llm)
    chat.expect_exact("While you were away:")
    chat.expect_exact("REMINDER: water the basil")
    chat.expect_exact(PROMPT)
    chat.sendcontrol("d")
    chat.expect(pexpect.EOF)


def test_a_reminder_cancelled_in_the_terminal_is_disarmed_in_the_gateway(
    home: Home, llm: FakeOpenAI, gateway: GatewayProcess
) -> None:
    chat = open_chat(home, llm)
    chat.expect_exact(PROMPT)
    chat.sendline("REMIND IN 3600 call the plumber")
    chat.expect_exact("tool: Scheduled")
    chat.expect_exact(PROMPT)
    (made,) = json.loads(home.schedules.read_text())["schedules"]
    gateway.wait_for_line(rf"schedule {made['id']} \(cli:direct\) taken up")
    chat.sendline("/schedules")
    chat.expect_exact(f"{made['id']} · once at")
    chat.expect_exact("call the plumber")
    chat.sendline(f"/unschedule {made['id']}")
    chat.expect_exact(f"Cancelled schedule {made['id']}")
    gateway.wait_for_line(rf"schedule {made['id']} was cancelled in another process; disarmed")
    assert gateway.health()[1]["schedules"]["armed"] == 0
    chat.sendcontrol("d")
    chat.expect(pexpect.EOF)


def test_the_owner_also_hears_a_terminal_reminder_on_telegram(home: Home, llm: FakeOpenAI) -> None:
    from tests.fakes.telegram_server import FakeTelegram

    with (
        FakeTelegram() as telegram,
        GatewayProcess(home, telegram, llm, NANOMEM_TELEGRAM__OWNER="1000"),
    ):
        chat = open_chat(home, llm)
        chat.expect_exact(PROMPT)
        chat.sendline("REMIND IN 2 take the bread out")
        chat.expect_exact("tool: Scheduled")
        chat.expect_exact("REMINDER: take the bread out")
        copies = wait_until(
            lambda: [m for m in telegram.sent_messages(1000) if "take the bread out" in m["text"]],
            what="the owner's copy",
        )
        assert copies[0]["text"].startswith("From the terminal chat cli:direct:")
        chat.sendcontrol("d")
        chat.expect(pexpect.EOF)
