"""Per-chat order is the core's job, once: messages through the bus reach the real AgentLoop,
which runs a chat's turns in order, chats concurrently, immediate commands at once, and makes
a flood wait at the door. The Telegram path end to end: the real gateway in-process against
the loopback Bot API."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nanomem.agent.channel import pump_outbound
from nanomem.agent.commands import STOPPED
from nanomem.app import App, build_app
from nanomem.gateway.service import Gateway
from nanomem.home import Home
from nanomem.providers.provider import Reply
from nanomem.providers.scripted import ScriptedProvider, text
from tests.conftest import make_app, settings_for
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import until
from tests.helpers.channels import FakeChannel

OWNER = 42


def last_user(messages: list[dict[str, Any]]) -> str:
    content = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    return str(content if isinstance(content, str) else content[0]["text"]).rsplit("\n", 1)[-1]


class Gate:
    """A model that answers each message with its own words, and holds the turns of chosen
    words until they are let go."""

    def __init__(self, *held: str) -> None:
        self.held = {word: asyncio.Event() for word in held}
        self.started: list[str] = []

    async def __call__(self, messages: list[dict[str, Any]]) -> Reply:
        said = last_user(messages)
        self.started.append(said)
        if (gate := self.held.get(said)) is not None:
            await gate.wait()
        return text(f"re: {said}")

    def provider(self, turns: int = 64) -> ScriptedProvider:
        return ScriptedProvider([self] * turns)


@dataclass
class Core:
    app: App
    channel: FakeChannel
    gate: Gate

    async def say(self, content: str, chat: str = "1") -> None:
        await self.channel.say(content, chat)

    def replies(self, chat: str = "1") -> list[str]:
        return [m.content for m in self.channel.sent if m.chat_id == chat]


@pytest.fixture
async def core(home: Home, request: pytest.FixtureRequest) -> AsyncIterator[Core]:
    gate: Gate = request.param
    app = make_app(home, gate.provider(), agent={"max_message_chars": 100})
    channel = FakeChannel("fake")
    await channel.start(app.bus)
    tasks = [
        asyncio.create_task(app.loop.run()),
        asyncio.create_task(pump_outbound(channel, app.bus)),
    ]
    try:
        yield Core(app, channel, gate)
    finally:
        for gate_event in gate.held.values():
            gate_event.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await app.loop.close(grace_s=2)


def workers() -> list[str]:
    return [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("turns:")]


@pytest.mark.parametrize("core", [Gate("first")], indirect=True)
async def test_a_chat_s_turns_run_in_order_while_other_chats_go_on(core: Core) -> None:
    gate = core.gate
    for word in ("first", "second", "third"):
        await core.say(word, chat="1")
    await core.say("elsewhere", chat="2")
    await until(lambda: core.replies("2") == ["re: elsewhere"])  # chat 1's turn still runs
    assert core.replies("1") == [] and gate.started.count("second") == 0
    gate.held["first"].set()
    await until(lambda: core.replies("1") == ["re: first", "re: second", "re: third"])
    await until(lambda: workers() == [])  # an idle chat costs no task


@pytest.mark.parametrize("core", [Gate("slow")], indirect=True)
async def test_stop_help_and_unknown_commands_are_answered_at_once_not_behind_the_turn(
    core: Core,
) -> None:
    gate = core.gate
    await core.say("slow")
    await core.say("queued")
    await until(lambda: gate.started == ["slow"])
    await core.say("/help")
    await until(lambda: len(core.replies()) == 1)
    assert "/stop" in core.replies()[0]  # the command list, while the turn still runs
    await core.say("/nosuch")  # an unknown command needs no session either
    await until(lambda: core.replies()[1:] == ["Unknown command /nosuch — try /help."])
    await core.say("/stop")
    await until(lambda: core.replies()[2:] == [STOPPED, "re: queued"])


@pytest.mark.parametrize("core", [Gate("hold")], indirect=True)
async def test_a_flood_waits_at_the_door(core: Core) -> None:
    bus = core.app.bus
    await core.say("hold")
    await until(lambda: bus.inbound_depth == 0 and core.replies() == [])
    too_long = "x" * 101  # answered without a turn: the flood is cheap to clear
    for _ in range(bus.maxsize - 1):
        await core.say(too_long)
    assert bus.inbound_depth == bus.maxsize - 1
    door = asyncio.create_task(core.say("one more"))
    for _ in range(20):  # the door stays shut while every place is taken
        await asyncio.sleep(0)
    assert not door.done() and bus.inbound_depth == bus.maxsize - 1
    core.gate.held["hold"].set()
    await asyncio.wait_for(door, 30)
    await until(lambda: core.replies()[-1:] == ["re: one more"], timeout=30)
    assert core.replies()[0] == "re: hold"


async def test_telegram_media_and_text_reach_the_model_in_the_order_sent(
    home: Home, tmp_path: Path
) -> None:
    """Telegram's own work on a message (answering a press, downloading a photo) runs in the
    core's per-chat order: a photo sent before a text is the first turn, with its file."""
    gate = Gate()
    with FakeTelegram() as fake:
        settings = settings_for(
            home,
            gateway={"port": 0},
            dream={"enabled": False},
            telegram={
                "enabled": True,
                "token": fake.token,
                "base_url": fake.base_url,
                "base_file_url": fake.base_file_url,
                "allow_from": [OWNER],
            },
        )
        provider = gate.provider()
        app = build_app(settings, home, provider, durable=True)
        gateway = Gateway.from_app(app)
        running = asyncio.create_task(gateway.run())
        try:
            await until(lambda: any(m == "getupdates" for m, _ in fake.calls), timeout=20)
            fake.send_photo(OWNER, b"jpeg-bytes" * 50_000, caption="look")
            fake.send_text(OWNER, "and then this")
            replies = await fake.wait_for_messages_async(OWNER, 2)
            assert [r["text"] for r in replies] == ["re: look", "re: and then this"]
            assert gate.started == ["look", "and then this"]
            photo = next(m for m in provider.calls[0] if m["role"] == "user")
            assert "[photo]" in str(photo["content"])
        finally:
            gateway.request_stop()
            await asyncio.wait_for(running, 30)
