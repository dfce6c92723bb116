"""A channel of the test's own for the Gateway: it fails to start on request and records
what it is sent."""

from __future__ import annotations

from nanomem.agent.bus import InboundMessage, MessageBus
from nanomem.agent.channel import BaseChannel, Capabilities, ChannelDown
from nanomem.agent.outbound import OutboundMessage
from nanomem.app import App
from nanomem.audience import Sender


class FakeChannel(BaseChannel):
    """A GatewayChannel whose first `fail_starts` starts fail, recording what it is sent."""

    def __init__(
        self, name: str, fail_starts: int = 0, capabilities: Capabilities | None = None
    ) -> None:
        self.name, self.fail_starts = name, fail_starts
        self.capabilities = capabilities or Capabilities()
        self.bus: MessageBus | None = None
        self.sent: list[OutboundMessage] = []
        self.trouble: str | None = None
        self.events: list[str] = []

    @classmethod
    def from_app(cls, app: App) -> FakeChannel:
        return cls("fake")

    async def start(self, bus: MessageBus) -> None:
        self.events.append("start")
        if self.fail_starts:
            self.fail_starts -= 1
            raise ChannelDown(f"{self.name}: the network is down")
        self.bus = bus

    async def stop_receiving(self) -> None:
        self.events.append("stop_receiving")

    def owner_chat(self) -> str | None:
        return "42" if self.capabilities.reaches_owner else None

    async def stop(self) -> None:
        self.events.append("stop")

    async def send(self, msg: OutboundMessage) -> None:
        self.sent.append(msg)  # it does not stream: the core sends it the whole reply only

    def problem(self) -> str | None:
        return self.trouble

    async def say(self, content: str, chat: str = "1") -> None:
        assert self.bus is not None
        await self.bus.publish_inbound(InboundMessage(self.name, chat, content, Sender("u")))
