"""Reminders through the real `nanomem gateway` (a subprocess), python-telegram-bot against the
loopback Bot API and the lean client against the loopback model: a reminder set a few seconds
ahead arrives in the chat that set it, also when it fell due while the gateway was down; chats
list and cancel their own schedules only; one made by someone since removed from allow_from is
not sent; `chat -m` says schedules need the gateway."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nanomem.cli.onboard import onboard
from nanomem.home import Home
from tests.conftest import cli_env, run_cli
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import wait_until
from tests.helpers.gateway import GatewayProcess, load_session, onboarded, texts
from tests.helpers.loopback import loopback


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
    if found := re.search(r"CANCEL (\w+)", text):
        return Step.tool_call("cancel_schedule", {"id": found.group(1)})
    return Step.reply("plain answer")


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[FakeTelegram, FakeOpenAI]]:
    with loopback(model) as both:
        yield both


@pytest.fixture(scope="module")
def gateway(
    servers: tuple[FakeTelegram, FakeOpenAI], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    home = onboarded(tmp_path_factory, "schedules")
    with GatewayProcess(home, *servers) as process:
        yield process


def replies(telegram: FakeTelegram, chat: int) -> list[str]:
    """What the bot said in a chat, without its tool-progress lines."""
    return [t for t in texts(telegram.sent_messages(chat)) if not t.startswith("⚙")]


def answer(telegram: FakeTelegram, chat: int, text: str) -> str:
    before = len(replies(telegram, chat))
    telegram.send_text(chat, text)
    return str(wait_until(lambda: replies(telegram, chat)[before:][:1], 30, "a reply")[0])


def arrives(telegram: FakeTelegram, chat: int, check: Callable[[str], bool]) -> str:
    found = wait_until(
        lambda: [t for t in replies(telegram, chat) if check(t)], 60, "the scheduled message"
    )
    return str(found[0])


def schedule_id(confirmation: str) -> str:
    found = re.search(r"Scheduled ([0-9a-f]{8}):", confirmation)
    assert found, confirmation
    return found.group(1)


def test_a_reminder_arrives_in_the_chat_that_set_it(
    gateway: GatewayProcess, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    telegram, _ = servers
    confirmation = answer(telegram, 1000, "REMIND IN 3 drink water")
    assert confirmation.startswith("tool: Scheduled ") and "once at" in confirmation
    assert arrives(telegram, 1000, lambda t: t.startswith("REMINDER")) == "REMINDER: drink water"
    assert replies(telegram, 1001) == []
    session = load_session(gateway.home, "telegram:1000")
    triggers = [m for m in session.messages if "[scheduled trigger" in str(m.get("content"))]
    assert len(triggers) == 1 and triggers[0]["role"] == "user"
    assert answer(telegram, 1000, "/schedules") == "No schedules in this chat."  # it was once


def test_a_chat_lists_and_cancels_only_its_own_schedules(
    gateway: GatewayProcess, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    telegram, _ = servers
    theirs = schedule_id(answer(telegram, 1002, "REMIND IN 3600 far away"))
    assert answer(telegram, 1003, f"/unschedule {theirs}").startswith(
        f"No schedule '{theirs}' in this chat"
    )
    assert answer(telegram, 1003, f"CANCEL {theirs}").startswith("tool: No schedule")
    assert answer(telegram, 1003, "/schedules") == "No schedules in this chat."
    listed = answer(telegram, 1002, "/schedules")
    assert listed.startswith(f"{theirs} · once at ") and listed.endswith("far away")
    assert answer(telegram, 1002, f"/unschedule {theirs}").startswith(
        f"Cancelled schedule {theirs}"
    )
    assert answer(telegram, 1002, "/schedules") == "No schedules in this chat."
    assert answer(telegram, 1002, "/unschedule").startswith("Usage: /unschedule <id>")


@contextmanager
def own_servers(
    tmp_path_factory: pytest.TempPathFactory, name: str
) -> Iterator[tuple[Home, FakeTelegram, FakeOpenAI]]:
    """A home and servers of its own, for a test that restarts its gateway (the module's
    gateway polls the shared ones)."""
    home = Home(tmp_path_factory.mktemp(name) / "home")
    onboard(home)
    with FakeTelegram() as telegram, FakeOpenAI() as llm:
        llm.set_fallback(model)
        yield home, telegram, llm


def test_a_reminder_due_while_the_gateway_was_down_arrives_at_start(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with own_servers(tmp_path_factory, "restart") as (home, telegram, llm):
        restart(home, telegram, llm)


def fall_due(home: Home, made: str) -> None:
    """What time does to a reminder while the gateway is down, without waiting for it: its
    moment is now past. Set far ahead, it cannot fire before the gateway stops, however slowly
    a loaded machine stops it (a lead of a few seconds could)."""
    body = json.loads(home.schedules.read_text())
    (schedule,) = [s for s in body["schedules"] if s["id"] == made]
    schedule["at"] = datetime.now(UTC).isoformat()
    home.schedules.write_text(json.dumps(body))


def restart(home: Home, telegram: FakeTelegram, llm: FakeOpenAI) -> None:
    first = GatewayProcess(home, telegram, llm)
    try:
        far = schedule_id(answer(telegram, 1010, "REMIND IN 7200 the far one"))
        soon = schedule_id(answer(telegram, 1010, "REMIND IN 3600 stretch your legs"))
    finally:
        assert first.stop() == 0, "".join(first.lines)
    assert not [line for line in first.lines if "fired in telegram:1010" in line]
    fall_due(home, soon)
    second = GatewayProcess(home, telegram, llm)
    try:
        reminder = arrives(telegram, 1010, lambda t: t.startswith("REMINDER"))
        assert reminder == "REMINDER: stretch your legs"
        second.wait_for_line(r"was due at .* while the gateway was down; running it now")
        telegram.send_text(1010, "/schedules")  # the far one survived the restart
        listed = arrives(telegram, 1010, lambda t: t.startswith(f"{far} · "))
        assert listed.startswith(f"{far} · once at ") and listed.endswith("the far one")
    finally:
        assert second.stop() == 0, "".join(second.lines)
    assert [t for t in replies(telegram, 1010) if t.startswith("REMINDER")] == [reminder]


def test_a_reminder_of_someone_removed_from_allow_from_is_not_sent(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with own_servers(tmp_path_factory, "removed") as (home, telegram, llm):
        first = GatewayProcess(home, telegram, llm)
        try:
            made = schedule_id(answer(telegram, 1015, "REMIND IN 3600 water the plants"))
        finally:
            assert first.stop() == 0, "".join(first.lines)
        fall_due(home, made)
        # The owner took 1015 off telegram.allow_from meanwhile.
        second = GatewayProcess(home, telegram, llm, NANOMEM_TELEGRAM__ALLOW_FROM="[1000]")
        try:
            second.wait_for_line(r"skipped: whoever made it \(1015\) is no longer allowed there")
            assert answer(telegram, 1000, "still there?") == "plain answer"  # the gateway runs
        finally:
            assert second.stop() == 0, "".join(second.lines)
        assert not [t for t in replies(telegram, 1015) if t.startswith("REMINDER")]
        assert not any("fired in telegram:1015" in line for line in first.lines + second.lines)


def test_chat_m_says_schedules_need_the_gateway(home: Home, fake_llm: FakeOpenAI) -> None:
    fake_llm.set_fallback(model)
    result = run_cli("chat", "-m", "REMIND IN 60 drink water", env=cli_env(home, fake_llm))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("tool: Error: Scheduled messages need the gateway")
    assert not home.schedules.exists()
    result = run_cli("chat", "-m", "/schedules", env=cli_env(home, fake_llm))
    assert result.stdout.startswith("Scheduled messages need the gateway")
