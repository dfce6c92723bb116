"""The channel port: how a chat surface (terminal, Telegram) plugs into the core."""

from __future__ import annotations

import asyncio
from typing import Protocol

from loguru import logger

from nanomem.bus import MessageBus, OutboundMessage


class Channel(Protocol):
    name: str

    async def start(self, bus: MessageBus) -> None:
        """Begin receiving messages and publishing them on the bus."""

    async def stop(self) -> None: ...

    async def send(self, msg: OutboundMessage) -> None: ...


async def pump_outbound(channel: Channel, bus: MessageBus) -> None:
    """Deliver one channel's outbox forever; a failed send is logged, never fatal."""
    box = bus.outbox(channel.name)
    while True:
        msg = await box.get()
        try:
            await channel.send(msg)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception(
                "{}: could not deliver a message to chat {}", channel.name, msg.chat_id
            )
