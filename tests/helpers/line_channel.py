"""The worked example of docs/channels.md: a whole channel in one small file.

A line protocol over a loopback TCP socket. A connection's first line says who is there and
where: `HELLO <name>` (a private chat of its own), `HELLO <name> CHAT <id>` (a private chat
named by the person, any id at all), `HELLO <name> ROOM <id>` (a shared room, its members'
connections together: `!team:x` reads like a Matrix room's id, nothing like Telegram's `-…`).
Every later line is a message. What the core sends comes back to the chat's connections as
one JSON line per message: {"style": ..., "text": ...}. With `stored`, each message goes
through the inbox first (the intake kit's store, replay and readmit). Used by
tests/test_line_channel.py and tests/test_line_rooms.py through the real gateway.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
from dataclasses import replace
from typing import Any

from nanomem.agent import (
    BaseChannel,
    Capabilities,
    InboundMessage,
    MessageBus,
    OutboundMessage,
    Pending,
    Text,
    hand_in_each,
    left_over,
    receive_until_stored,
    vouched_again,
)
from nanomem.audience import Sender

HELLO = "HELLO "


class LineChannel(BaseChannel):
    name = "line"

    # Plain lines: no streaming, no edits, no buttons (the core lists choices in the text),
    # no markup. A connected person can be told things nobody asked for (scheduled turns), and
    # the owner, while connected, can be reached privately.
    # The core sends plain text, split to `max_chars` (a person's client with a short line
    # buffer, say).
    def __init__(self, owner: str = "", max_chars: int = 0, stored: bool = False) -> None:
        self.capabilities = Capabilities(
            markup="plain", max_chars=max_chars, pushes=True, reaches_owner=True
        )
        self.owner, self.stored = owner, stored
        self.port = 0
        self._bus: MessageBus | None = None
        self._server: asyncio.Server | None = None
        self._chats: dict[str, dict[asyncio.StreamWriter, str]] = {}  # chat → connection → name
        self._rooms: set[str] = set()  # the chats that are shared rooms: the channel's own fact
        self._numbers = itertools.count(1)

    async def start(self, bus: MessageBus) -> None:
        self._bus = bus
        if self.stored:  # what an earlier run stored and did not answer goes first, in order
            hand_in = functools.partial(self._hand_in, retry=False)
            await hand_in_each(bus, self.name, await left_over(bus, self.name), hand_in, _text)
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop_receiving(self) -> None:
        if self._server is not None:
            self._server.close()

    async def stop(self) -> None:
        await self.stop_receiving()
        for connections in self._chats.values():
            for writer in connections:
                writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hello = (await reader.readline()).decode("utf-8", "replace").split()
        if len(hello) not in (2, 4) or hello[0] != HELLO.strip():
            writer.close()  # refused: it did not say who it is
            return
        name, (where, chat) = hello[1], hello[2:] or ("CHAT", str(next(self._numbers)))
        if where == "ROOM":
            self._rooms.add(chat)
        elif where != "CHAT" or chat in self._rooms:
            writer.close()  # a private chat never joins a room by naming it
            return
        self._chats.setdefault(chat, {})[writer] = name
        try:
            while line := await reader.readline():
                text = line.decode("utf-8", "replace").strip()
                if text and self._bus is not None:
                    await self._take(chat, text, self._sender(name, chat))
        finally:
            del self._chats[chat][writer]
            if not self._chats[chat]:
                del self._chats[chat]

    async def _take(self, chat: str, text: str, sender: Sender) -> None:
        assert self._bus is not None
        msg = InboundMessage(self.name, chat, text, sender)
        if self.stored:  # on disk, with who sent it as vouched now, before it is handed in
            item = (chat, {"text": text, "name": sender.name}, sender)
            (seq,) = await receive_until_stored(self._bus, self.name, [item], "a line")
            if seq is not None:
                msg = replace(msg, id=InboundMessage.inbox_id(seq), seq=seq)
        await self._bus.publish_inbound(msg)

    async def _hand_in(self, pending: Pending, *, retry: bool) -> None:
        """A stored message again: as its row vouched (a room stays a room, whatever its chat
        id looks like), admitted again by today's rules (a nameless row is not)."""
        assert self._bus is not None
        name = pending.payload.get("name")
        derived = self._sender(name, pending.chat) if isinstance(name, str) and name else None
        if (sender := await vouched_again(self._bus, pending, derived)) is None:
            return
        msg = InboundMessage(self.name, pending.chat, _text(pending.payload), sender)
        msg = replace(msg, id=InboundMessage.inbox_id(pending.seq), seq=pending.seq, replayed=True)
        await self._bus.publish_inbound(msg)

    async def readmit(self, pending: Pending) -> bool:
        if self._bus is None:
            return False
        await self._hand_in(pending, retry=True)
        return True

    def _sender(self, name: str, chat: str) -> Sender:
        """From the channel's own facts: who said HELLO, and whether they said it in a room.
        Someone is there to answer a question while connected."""
        owner, room = name == self.owner, chat in self._rooms
        return Sender(name, name, is_owner=owner, can_answer=True, shared_room=room)

    async def send(self, msg: OutboundMessage) -> None:
        """The core calls this one message at a time per chat, in order, already shaped to the
        capabilities: only whole texts (and questions as text) arrive here."""
        part = msg.part
        style = part.style if isinstance(part, Text) else type(part).__name__.lower()
        line = json.dumps({"style": style, "text": msg.content}).encode() + b"\n"
        for writer in list(self._chats.get(msg.chat_id, ())):  # nobody left: nothing to keep
            writer.write(line)
            await writer.drain()

    def admits(self, chat: str, sender: str) -> bool:
        return chat in self._chats  # a scheduled turn reaches only a connected chat

    def owner_chat(self) -> str | None:
        private = (c for c, names in self._chats.items() if c not in self._rooms)
        return next((c for c in private if self.owner in self._chats[c].values()), None)


def _text(payload: dict[str, Any]) -> str:
    text = payload.get("text")
    return text if isinstance(text, str) else ""
