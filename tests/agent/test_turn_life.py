"""The core tells a channel with Capabilities.turns when each turn starts and ends, in order
with the chat's other messages: the real AgentLoop, its outbound path and a recording channel."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from nanomem.agent.bus import InboundMessage
from nanomem.agent.channel import Capabilities, pump_outbound
from nanomem.agent.commands import STOPPED
from nanomem.agent.outbound import OutboundMessage, Text, TurnEnded, TurnStarted
from nanomem.audience import Sender
from nanomem.home import Home
from nanomem.providers.provider import Reply
from nanomem.providers.scripted import ScriptedProvider, text
from tests.conftest import make_app
from tests.helpers import until
from tests.helpers.channels import FakeChannel


class Gate:
    """A model that answers each message with its own words, holding the turns of chosen
    words until they are let go."""

    def __init__(self, *held: str) -> None:
        self.held = {word: asyncio.Event() for word in held}
        self.started: list[str] = []

    async def __call__(self, messages: list[dict[str, Any]]) -> Reply:
        said = str(next(m["content"] for m in reversed(messages) if m["role"] == "user"))
        said = said.rsplit("\n", 1)[-1]
        self.started.append(said)
        if (held := self.held.get(said)) is not None:
            await held.wait()
        return text(f"re: {said}")

    def provider(self) -> ScriptedProvider:
        return ScriptedProvider([self] * 16)


def shown(msg: OutboundMessage) -> str:
    """`start:<command>`, `end`/`stopped`, or the text."""
    part = msg.part
    if isinstance(part, TurnStarted):
        return f"start:{part.command}"
    if isinstance(part, TurnEnded):
        return "stopped" if part.stopped else "end"
    return msg.content


def life(channel: FakeChannel) -> list[str]:
    """What the chat was sent, in order."""
    return [shown(m) for m in channel.sent]


def lives(channel: FakeChannel) -> list[list[str]]:
    """What was sent for each message, in the order the messages came."""
    by_message: dict[str | None, list[str]] = {}
    for msg in channel.sent:
        by_message.setdefault(msg.reply_to, []).append(shown(msg))
    return list(by_message.values())


@pytest.fixture
async def running(home: Home, request: pytest.FixtureRequest) -> AsyncIterator[FakeChannel]:
    gate, turns = request.param
    agent = {"max_message_chars": 100, "max_concurrent_turns": 1}
    app = make_app(home, gate.provider(), agent=agent)
    channel = FakeChannel("fake", capabilities=Capabilities(turns=turns))
    channel.gate, channel.app = gate, app  # type: ignore[attr-defined]
    await channel.start(app.bus)
    tasks = [
        asyncio.create_task(app.loop.run()),
        asyncio.create_task(pump_outbound(channel, app.bus)),
    ]
    try:
        yield channel
    finally:
        for held in gate.held.values():
            held.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await app.loop.close(grace_s=2)


@pytest.mark.parametrize("running", [(Gate(), True)], indirect=True)
async def test_each_message_s_turn_starts_and_ends_around_its_answer(
    running: FakeChannel,
) -> None:
    for n, said in enumerate(("hello", "/help", "/nosuch", "x" * 101), start=1):
        await running.say(said)  # the last is refused for its length: an answer, and the end
        await until(lambda n=n: life(running).count("end") == n)  # type: ignore[misc]
    hello, help_, unknown, too_long = lives(running)
    assert hello == ["start:", "re: hello", "end"]
    assert help_[0] == "start:help" and help_[2] == "end" and "/stop" in help_[1]
    assert unknown == ["start:nosuch", "Unknown command /nosuch — try /help.", "end"]
    assert too_long == ["start:", "That message is too long (101 characters; limit 100).", "end"]
    assert None not in {m.reply_to for m in running.sent}  # each names its message


@pytest.mark.parametrize("running", [(Gate("slow"), True)], indirect=True)
async def test_a_stopped_turn_ends_stopped_before_stop_s_own_answer(running: FakeChannel) -> None:
    gate = running.gate  # type: ignore[attr-defined]
    await running.say("slow")
    await running.say("queued")
    await until(lambda: gate.started == ["slow"])
    await running.say("/stop")
    await until(lambda: "re: queued" in life(running))
    await until(lambda: life(running).count("end") == 2)
    assert lives(running) == [
        ["start:", "stopped"],  # the turn /stop cut, by its message
        ["start:stop", STOPPED, "end"],
        ["start:", "re: queued", "end"],
    ]
    order = life(running)
    assert order.index("stopped") < order.index(STOPPED)  # what it showed stays above


@pytest.mark.parametrize("running", [(Gate("slow"), True)], indirect=True)
async def test_a_turn_the_gateway_stopping_never_began_ends_stopped_unanswered(
    running: FakeChannel,
) -> None:
    gate, app = running.gate, running.app  # type: ignore[attr-defined]
    await running.say("slow", chat="1")
    await until(lambda: gate.started == ["slow"])
    await running.say("waits for a turn slot", chat="2")  # one turn at a time here
    await until(lambda: [m.chat_id for m in running.sent] == ["1", "2"])  # both began
    app.loop.stop_taking()
    gate.held["slow"].set()
    await until(lambda: len(running.sent) == 5)
    assert lives(running) == [["start:", "re: slow", "end"], ["start:", "stopped"]]
    assert gate.started == ["slow"]  # the model never saw the second


@pytest.mark.parametrize("running", [(Gate(), True)], indirect=True)
async def test_the_turn_starts_after_the_channel_s_own_work_on_the_message(
    running: FakeChannel,
) -> None:
    assert running.bus is not None
    bus = running.bus

    async def prepare(msg: InboundMessage) -> InboundMessage | None:
        note = OutboundMessage("fake", "1", Text("downloading", "command"))
        await bus.publish_outbound(note)
        return None if msg.content == "answered here" else msg

    for said in ("answered here", "a photo"):
        msg = InboundMessage("fake", "1", said, Sender("u"))
        await bus.publish_inbound(replace(msg, prepare=prepare))
    await until(lambda: "end" in life(running))
    assert life(running) == ["downloading", "downloading", "start:", "re: a photo", "end"]


@pytest.mark.parametrize("running", [(Gate(), False)], indirect=True)
async def test_a_channel_without_turns_is_told_nothing_of_them(running: FakeChannel) -> None:
    await running.say("hello")
    await until(lambda: life(running) == ["re: hello"])
    await asyncio.sleep(0.05)
    assert life(running) == ["re: hello"] and running.bus is not None
    assert running.bus.turns == set() and running.bus.outbound_depth() == {"fake": 0}
