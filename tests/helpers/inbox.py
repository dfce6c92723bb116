"""A channel that records what it is sent, a message stored in the inbox as a channel stores
it, and one parked after its attempts failed."""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor

from nanomem.agent.bus import InboundMessage, MessageBus
from nanomem.agent.channel import BaseChannel, DeliveryLater
from nanomem.agent.inbox import SqliteInbox
from nanomem.agent.outbound import OutboundMessage
from nanomem.agent.retries import record_failure, retry_delay
from nanomem.audience import Sender
from nanomem.home import Home


class Recorder(BaseChannel):
    """It does not stream: the core sends it whole messages only."""

    name = "telegram"

    def __init__(self, fail_first: bool = False) -> None:
        self.sent: list[str] = []
        self.fail_first = fail_first

    async def start(self, bus: MessageBus) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, msg: OutboundMessage) -> None:
        if self.fail_first:
            self.fail_first = False
            raise DeliveryLater("network down")
        self.sent.append(msg.content)


async def stored(bus: MessageBus, chat: str, text: str) -> InboundMessage:
    (seq,) = await bus.receive("telegram", [(chat, {"text": text}, Sender("1"))])
    assert seq is not None
    return InboundMessage(
        "telegram", chat, text, Sender("1"), id=InboundMessage.inbox_id(seq), seq=seq
    )


def parked_message(home: Home, text: str, chat: str = "1002") -> int:
    """A message that failed three times, recorded as the gateway records it (blocking: its
    event loop runs in a thread of its own, so a caller may have one running, as an asyncio
    test or Playwright's sync API does)."""
    inbox = SqliteInbox(home.inbox)
    bus = MessageBus(inbox=inbox)
    bus.retry_plan = functools.partial(retry_delay, max_attempts=3)
    (seq,) = inbox.add("telegram", [(chat, {"text": text}, Sender())], None)

    async def fail_thrice() -> None:
        for _ in range(3):
            await record_failure(bus, seq, IsADirectoryError(), text, f"telegram:{chat}")

    with ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, fail_thrice()).result()
    inbox.close()
    return seq
