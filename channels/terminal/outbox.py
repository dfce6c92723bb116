"""The gateway's channel for terminal sessions (`cli:…`): what the agent says there unasked (a
reminder made in `nanomem chat`, a background task's result) waits, unread, for `nanomem chat`
on that session (nanomem/agent/unread.py), which shows it at start or, while open, within a
second. With `schedule.terminal_to_owner` and a channel that reaches the owner privately
(Telegram with telegram.owner), the owner also gets a copy there: a person who set a reminder
at the terminal and walked away still hears it."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from loguru import logger

from nanomem.agent import (
    BaseChannel,
    Capabilities,
    MessageBus,
    OutboundMessage,
    TellOwner,
    Text,
    Unread,
)

if TYPE_CHECKING:
    from nanomem.app import App


class TerminalOutbox(BaseChannel):
    name = "cli"
    capabilities = Capabilities(pushes=True)

    def __init__(self, unread: Unread, *, copy_to_owner: bool = False) -> None:
        self.unread = unread
        self.copy_to_owner = copy_to_owner
        self._owner: TellOwner | None = None

    @classmethod
    def from_app(cls, app: App) -> TerminalOutbox:
        return cls(Unread.of(app.home), copy_to_owner=app.settings.schedule.terminal_to_owner)

    def reach_owner(self, owner: TellOwner | None) -> None:
        """The gateway's outlet to the owner (None: no channel reaches them)."""
        self._owner = owner if self.copy_to_owner else None

    async def start(self, bus: MessageBus) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send(self, msg: OutboundMessage) -> None:
        if not isinstance(msg.part, Text) or not msg.content.strip():
            return
        session = f"{msg.channel}:{msg.chat_id}"
        await asyncio.to_thread(self.unread.leave, session, msg.content)
        if self._owner is None:
            return
        try:
            await self._owner(Text(f"From the terminal chat {session}:\n\n{msg.content}"))
        except Exception as exc:  # the terminal has it: a copy that fails is only logged
            logger.warning("cli: the owner's copy of a message to {} failed: {}", session, exc)
