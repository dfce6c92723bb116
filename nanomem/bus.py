"""The message bus: channels put inbound messages on it, the agent loop puts replies back."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

OutboundKind = Literal["reply", "progress", "error"]


def _now() -> datetime:
    return datetime.now(UTC)


def _new_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class InboundMessage:
    channel: str
    chat_id: str
    content: str
    sender_id: str = ""
    media: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    timestamp: datetime = field(default_factory=_now)
    id: str = field(default_factory=_new_id)

    @property
    def session_key(self) -> str:
        return f"{self.channel}:{self.chat_id}"


@dataclass(frozen=True)
class OutboundMessage:
    channel: str
    chat_id: str
    content: str
    kind: OutboundKind = "reply"
    reply_to: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def answering(
        cls, msg: InboundMessage, content: str, kind: OutboundKind = "reply", **metadata: Any
    ) -> OutboundMessage:
        return cls(msg.channel, msg.chat_id, content, kind, msg.id, dict(metadata))


class MessageBus:
    """Bounded queues: a flood of messages waits at the door instead of growing memory."""

    def __init__(self, maxsize: int = 1000) -> None:
        self._maxsize = maxsize
        self._inbound: asyncio.Queue[InboundMessage] = asyncio.Queue(maxsize)
        self._outboxes: dict[str, asyncio.Queue[OutboundMessage]] = {}

    async def publish_inbound(self, msg: InboundMessage) -> None:
        await self._inbound.put(msg)

    async def next_inbound(self) -> InboundMessage:
        return await self._inbound.get()

    def outbox(self, channel: str) -> asyncio.Queue[OutboundMessage]:
        """Each channel drains its own queue, so a stalled channel never delays another."""
        box = self._outboxes.get(channel)
        if box is None:
            box = self._outboxes[channel] = asyncio.Queue(self._maxsize)
        return box

    async def publish_outbound(self, msg: OutboundMessage) -> None:
        await self.outbox(msg.channel).put(msg)

    @property
    def inbound_depth(self) -> int:
        return self._inbound.qsize()

    def outbound_depth(self) -> dict[str, int]:
        return {name: box.qsize() for name, box in self._outboxes.items()}
