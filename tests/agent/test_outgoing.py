"""The core's per-chat outbound path (agent/channel.py: pump_outbound): pieces of a reply a
slow channel has not taken yet merge into the newest, and a message refused "later, in N
seconds" is sent again within the run, for its chat only."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nanomem.agent.bus import InboundMessage, MessageBus
from nanomem.agent.channel import (
    LATER_ATTEMPTS,
    BaseChannel,
    Capabilities,
    DeliveryLater,
    pump_outbound,
)
from nanomem.agent.inbox import SqliteInbox
from nanomem.agent.outbound import Delta, DeltaEnd, OutboundMessage, Part, Text
from tests.conftest import log_lines
from tests.helpers import until
from tests.helpers.inbox import stored


@dataclass
class Slow(BaseChannel):
    """Takes `pause_s` per message; refuses the messages named in `refuse` (by their text) as
    a rate limit would, that many times each, before it takes them."""

    pause_s: float = 0.0
    refuse: dict[str, int] = field(default_factory=dict)
    retry_in_s: float | None = 0.05
    sent: list[OutboundMessage] = field(default_factory=list)
    tries: list[str] = field(default_factory=list)
    name: str = "telegram"
    capabilities: Capabilities = field(
        default_factory=lambda: Capabilities(streams=True, max_chars=40)
    )

    async def start(self, bus: MessageBus) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, msg: OutboundMessage) -> None:
        self.tries.append(msg.content)
        await asyncio.sleep(self.pause_s)
        if self.refuse.get(msg.content, 0) > 0:
            self.refuse[msg.content] -= 1
            raise DeliveryLater("Too Many Requests", retry_in_s=self.retry_in_s)
        self.sent.append(msg)

    def texts(self, chat: str) -> list[str]:
        return [m.content for m in self.sent if m.chat_id == chat and isinstance(m.part, Text)]


@pytest.fixture
async def bus(tmp_path: Path) -> AsyncIterator[MessageBus]:
    bus = MessageBus(inbox=SqliteInbox(tmp_path / "inbox.db"))
    yield bus
    assert bus.inbox is not None
    bus.inbox.close()


@pytest.fixture
async def pumped() -> AsyncIterator[list[asyncio.Task[None]]]:
    pumps: list[asyncio.Task[None]] = []
    yield pumps
    for pump in pumps:
        pump.cancel()
    await asyncio.gather(*pumps, return_exceptions=True)


def out(chat: str, part: Part, reply_to: str = "in-1", seq: int | None = None) -> OutboundMessage:
    return OutboundMessage("telegram", chat, part, reply_to, seq)


async def answer(bus: MessageBus, msg: InboundMessage, text: str) -> None:
    """As the core answers a stored message: recorded, then sent."""
    reply = OutboundMessage.answering(msg, Text(text))
    await bus.answered(msg, reply)
    await bus.publish_outbound(reply)


async def test_pieces_waiting_behind_a_slow_channel_merge_into_the_newest(
    bus: MessageBus, pumped: list[asyncio.Task[None]]
) -> None:
    channel = Slow(pause_s=0.03)
    pumped.append(asyncio.create_task(pump_outbound(channel, bus)))
    words = [f"w{n} " for n in range(100)]
    so_far = ""
    for step, count in ((0, 60), (1, 40)):
        for word in words[:count]:
            so_far += word
            await bus.publish_outbound(out("1", Delta(word, so_far, step)))
        if step == 0:
            first = so_far
            await bus.publish_outbound(out("1", DeltaEnd(0)))
            so_far = ""
    await bus.publish_outbound(out("1", Text("the reply")))
    await until(lambda: channel.texts("1") == ["the reply"])
    pieces = [m.part for m in channel.sent if isinstance(m.part, Delta)]
    assert len(pieces) < 15  # a hundred made, a few sent: only the newest text mattered
    kinds = [type(m.part).__name__ for m in channel.sent]
    end = kinds.index("DeltaEnd")  # never merged across a step's end or the reply
    assert set(kinds[:end]) == {"Delta"} and set(kinds[end + 1 : -1]) == {"Delta"}
    step0 = [p for p in pieces if p.step == 0]
    step1 = [p for p in pieces if p.step == 1]
    assert step0[-1].so_far == first == "".join(p.piece for p in step0)  # the same text
    assert step1[-1].so_far == so_far == "".join(p.piece for p in step1)
    assert bus.outbound_depth() == {"telegram": 0}


async def test_pieces_of_different_replies_never_merge(
    bus: MessageBus, pumped: list[asyncio.Task[None]]
) -> None:
    channel = Slow(pause_s=0.03)
    pumped.append(asyncio.create_task(pump_outbound(channel, bus)))
    await bus.publish_outbound(out("1", Text("hold the worker")))
    for reply_to in ("a", "b", "a"):
        await bus.publish_outbound(out("1", Delta("x", "x", 0), reply_to))
    await until(lambda: len(channel.sent) == 4)
    assert [m.reply_to for m in channel.sent[1:]] == ["a", "b", "a"]


async def test_a_rate_limited_reply_is_delivered_within_the_run_in_order_once(
    bus: MessageBus, pumped: list[asyncio.Task[None]]
) -> None:
    channel = Slow(refuse={"first": 2})
    pumped.append(asyncio.create_task(pump_outbound(channel, bus)))
    msgs = [await stored(bus, chat, text) for chat, text in (("1", "q1"), ("1", "q2"), ("2", "q"))]
    replies = zip(msgs, ("first", "second", "other chat"), strict=True)
    for msg, text in replies:
        await answer(bus, msg, text)
    await until(lambda: channel.texts("1") == ["first", "second"])
    assert channel.texts("2") == ["other chat"]
    order = [m.content for m in channel.sent]
    assert order.index("other chat") < order.index("first")  # it never waited for chat 1
    assert channel.tries.count("first") == 3 and channel.tries.count("second") == 1
    assert bus.inbox is not None
    await until(lambda: bus.inbox is not None and bus.inbox.pending("telegram") == [])


async def test_a_split_reply_goes_on_after_the_parts_delivered(
    bus: MessageBus, pumped: list[asyncio.Task[None]]
) -> None:
    channel = Slow()
    pumped.append(asyncio.create_task(pump_outbound(channel, bus)))
    long = "\n\n".join(f"paragraph {n} " + "x" * 20 for n in range(4))  # 40 chars a part
    second = long.split("\n\n")[1]
    channel.refuse[second] = 2
    await bus.publish_outbound(out("1", Text(long)))
    await until(lambda: len(channel.texts("1")) == 4)
    assert channel.texts("1") == long.split("\n\n")  # each part once, in order
    assert channel.tries.count(long.split("\n\n")[0]) == 1


async def test_retries_are_bounded_then_kept_for_the_next_start_and_told_once(
    bus: MessageBus, pumped: list[asyncio.Task[None]]
) -> None:
    channel = Slow(refuse={"never": 100}, retry_in_s=0.01)
    pumped.append(asyncio.create_task(pump_outbound(channel, bus)))
    msg = await stored(bus, "1", "q")
    with log_lines("WARNING") as logged:
        await answer(bus, msg, "never")
        await bus.publish_outbound(out("1", Text("next")))
        await until(lambda: channel.texts("1") == ["next"])  # the chat goes on after it
    assert channel.tries.count("never") == LATER_ATTEMPTS
    assert logged == ["telegram: a reply to chat 1 is kept for the next start: Too Many Requests"]
    assert bus.inbox is not None and [p.seq for p in bus.inbox.pending("telegram")] == [msg.seq]


async def test_a_long_wait_is_not_waited_for_when_the_gateway_stops(
    bus: MessageBus, pumped: list[asyncio.Task[None]]
) -> None:
    channel = Slow(refuse={"later": 1}, retry_in_s=60)
    pumped.append(asyncio.create_task(pump_outbound(channel, bus)))
    msg = await stored(bus, "1", "q")
    await answer(bus, msg, "later")
    await bus.publish_outbound(out("1", Text("behind it")))
    await bus.publish_outbound(out("2", Text("elsewhere")))
    await until(lambda: channel.texts("2") == ["elsewhere"] and "later" in channel.tries)
    assert bus.outbound_depth() == {"telegram": 2}  # the refused one and the one behind it
    bus.closing.set()
    await until(lambda: bus.outbound_depth() == {"telegram": 0}, timeout=2)
    assert channel.texts("1") == []  # nothing after it jumped the queue
    assert bus.inbox is not None and [p.seq for p in bus.inbox.pending("telegram")] == [msg.seq]
