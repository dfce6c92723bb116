"""The turns a channel shows, chat by chat: which messages wait for an answer, the typing
indicator while they do, which reply grows in which sent message, and what a turn /stop cut
short leaves. Driven by what the core sends a channel with `Capabilities.turns`, in the chat's
order (TurnStarted, the answer, TurnEnded); shared by every channel that shows typing or
streams (docs/channels.md), so none rebuilds a turn's life from its replies.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from nanomem.agent.outbound import OutboundMessage, TurnStarted

S = TypeVar("S")  # the channel's own record of one reply growing in the chat


@dataclass(frozen=True)
class TypingPace:
    delay_s: float = 1.0  # an answer (or its first words) within this needs no indicator
    every_s: float = 4.0  # how long the platform shows one indicator
    silent_max_s: float = 600.0  # a turn silent this long gets no more


@dataclass(eq=False)
class ChatTurns(Generic[S]):
    """One chat's turns."""

    pending: list[str] = field(default_factory=list)  # inbound ids not answered, oldest first
    commands: dict[str, str] = field(default_factory=dict)  # pending id → its command's name
    streams: dict[str, S] = field(default_factory=dict)  # inbound id → the reply growing for it
    typing: asyncio.Task[None] | None = None
    active: float = 0.0  # the last sign of life of a turn (monotonic)

    def stop_typing(self) -> None:
        if self.typing is not None:
            self.typing.cancel()
            self.typing = None


class Turns(Generic[S]):
    """Every chat's turns on one channel. `show_typing(chat)` shows the indicator once (it may
    raise: the indicator ends, the answer still comes); `quiet(chat)`, when true (a flood wait's
    seconds left), skips one for now."""

    def __init__(
        self,
        show_typing: Callable[[str], Awaitable[None]] | None = None,
        pace: TypingPace = TypingPace(),
        quiet: Callable[[str], float] = lambda chat: 0.0,
    ) -> None:
        self.show_typing, self.pace, self.quiet = show_typing, pace, quiet
        self.chats: dict[str, ChatTurns[S]] = {}

    def chat(self, key: str) -> ChatTurns[S]:
        chat = self.chats.get(key)
        if chat is None:
            chat = self.chats[key] = ChatTurns()
        return chat

    def started(self, msg: OutboundMessage) -> None:
        """TurnStarted: its person now waits for an answer; the indicator shows until it."""
        part = msg.part
        if not isinstance(part, TurnStarted) or msg.reply_to is None:
            return
        chat = self.chat(msg.chat_id)
        chat.active = time.monotonic()
        chat.pending.append(msg.reply_to)
        if part.command:
            chat.commands[msg.reply_to] = part.command
        if chat.typing is None and self.show_typing is not None:
            run = self._type(msg.chat_id, chat)
            chat.typing = asyncio.create_task(run, name=f"typing:{msg.chat_id}")

    def answering(self, msg: OutboundMessage) -> S | None:
        """A whole answer to `msg.reply_to` goes out: nobody waits for it any more. The reply
        that grew for it, which the answer replaces."""
        chat = self.chats.get(msg.chat_id)
        if chat is None or msg.reply_to is None:
            return None
        chat.active = time.monotonic()
        self._done(chat, msg.reply_to)
        return chat.streams.pop(msg.reply_to, None)

    def ended(self, msg: OutboundMessage) -> S | None:
        """TurnEnded: the reply still growing for it, if any, which nothing will replace (a
        turn /stop cut short): what the person saw of it should stay shown."""
        chat = self.chats.get(msg.chat_id)
        if chat is None or msg.reply_to is None:
            return None
        self._done(chat, msg.reply_to)
        return chat.streams.pop(msg.reply_to, None)

    def growing(self, msg: OutboundMessage, make: Callable[[], S]) -> S | None:
        """The reply growing for the turn `msg` is a piece of (made on its first piece); None
        when nobody waits for that turn (answered already, or another run's)."""
        chat = self.chats.get(msg.chat_id)
        if chat is None or msg.reply_to is None or msg.reply_to not in chat.pending:
            return None
        chat.active = time.monotonic()
        stream = chat.streams.get(msg.reply_to)
        if stream is None:
            stream = chat.streams[msg.reply_to] = make()
        return stream

    def waiting(self, key: str) -> bool:
        """Whether anyone in this chat waits for an answer."""
        chat = self.chats.get(key)
        return chat is not None and bool(chat.pending)

    def is_turn(self, key: str, inbound_id: str | None) -> bool:
        """Whether `inbound_id` is a model turn (not a command) still waiting here."""
        chat = self.chats.get(key)
        waits = chat is not None and inbound_id in chat.pending
        return waits and chat is not None and inbound_id not in chat.commands

    def touch(self, key: str) -> None:
        """A sign of life (a tool's progress): the indicator goes on."""
        if (chat := self.chats.get(key)) is not None:
            chat.active = time.monotonic()

    def idle(self, key: str) -> bool:
        chat = self.chats.get(key)
        return chat is None or not (chat.pending or chat.streams or chat.typing)

    def forget_if_idle(self, key: str) -> None:
        """Drop an idle chat, so the map does not grow with every chat ever seen."""
        if key in self.chats and self.idle(key):
            del self.chats[key]

    def close(self) -> list[S]:
        """Stop every indicator; the replies still growing, for the channel to drop."""
        streams: list[S] = []
        for chat in self.chats.values():
            chat.stop_typing()
            streams.extend(chat.streams.values())
            chat.streams.clear()
        return streams

    def _done(self, chat: ChatTurns[S], inbound_id: str) -> None:
        if inbound_id in chat.pending:
            chat.pending.remove(inbound_id)
            chat.commands.pop(inbound_id, None)
        if not chat.pending:
            chat.stop_typing()

    async def _type(self, key: str, chat: ChatTurns[S]) -> None:
        assert self.show_typing is not None
        pace = self.pace
        try:
            await asyncio.sleep(pace.delay_s)
            while chat.pending and time.monotonic() - chat.active < pace.silent_max_s:
                if not self.quiet(key):
                    await self.show_typing(key)
                await asyncio.sleep(pace.every_s)
        except Exception as exc:  # the indicator ends; the answer still comes
            from loguru import logger  # off the start-up path (this module is a channel's)

            logger.debug("the typing indicator in {} ended: {}", key, exc)
        finally:
            if chat.typing is asyncio.current_task():
                chat.typing = None
