"""A channel that records what it is sent, and a message stored in the inbox as a channel
stores it."""

from __future__ import annotations

from nanomem.agent.bus import InboundMessage, MessageBus
from nanomem.agent.channel import BaseChannel, DeliveryLater
from nanomem.agent.outbound import OutboundMessage
from nanomem.audience import Sender


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
