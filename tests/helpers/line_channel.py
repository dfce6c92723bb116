"""The worked example of docs/channels.md: a whole channel in one small file.

A line protocol over a loopback TCP socket. Each connection is a chat. Its first line says who
is there (`HELLO <name>`); every later line is a message. What the core sends comes back as
one JSON line per message: {"style": ..., "text": ...}. Used by tests/test_line_channel.py
through the real gateway.
"""

from __future__ import annotations

import asyncio
import itertools
import json

from nanomem.agent import (
    BaseChannel,
    Capabilities,
    InboundMessage,
    MessageBus,
    OutboundMessage,
    Text,
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
    def __init__(self, owner: str = "", max_chars: int = 0) -> None:
        self.capabilities = Capabilities(
            markup="plain", max_chars=max_chars, pushes=True, reaches_owner=True
        )
        self.owner = owner
        self.port = 0
        self._bus: MessageBus | None = None
        self._server: asyncio.Server | None = None
        self._chats: dict[str, asyncio.StreamWriter] = {}  # chat id → its connection
        self._names: dict[str, str] = {}  # chat id → who said HELLO there
        self._numbers = itertools.count(1)

    async def start(self, bus: MessageBus) -> None:
        self._bus = bus
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop_receiving(self) -> None:
        if self._server is not None:
            self._server.close()

    async def stop(self) -> None:
        await self.stop_receiving()
        for writer in self._chats.values():
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        chat = str(next(self._numbers))
        hello = (await reader.readline()).decode("utf-8", "replace").strip()
        if not hello.startswith(HELLO):
            writer.close()  # refused: it did not say who it is
            return
        self._chats[chat], self._names[chat] = writer, hello[len(HELLO) :]
        try:
            while line := await reader.readline():
                text = line.decode("utf-8", "replace").strip()
                if text and self._bus is not None:
                    await self._bus.publish_inbound(
                        InboundMessage(self.name, chat, text, self._sender(chat))
                    )
        finally:
            del self._chats[chat], self._names[chat]

    def _sender(self, chat: str) -> Sender:
        """From the channel's own facts: who said HELLO on this connection. Someone is there to
        answer a question while connected."""
        name = self._names[chat]
        return Sender(name, name, is_owner=name == self.owner, can_answer=True)

    async def send(self, msg: OutboundMessage) -> None:
        """The core calls this one message at a time per chat, in order, already shaped to the
        capabilities: only whole texts (and questions as text) arrive here."""
        writer = self._chats.get(msg.chat_id)
        if writer is None:
            return  # the person left: nothing to keep (this channel has no inbox)
        part = msg.part
        style = part.style if isinstance(part, Text) else type(part).__name__.lower()
        writer.write(json.dumps({"style": style, "text": msg.content}).encode() + b"\n")
        await writer.drain()

    def admits(self, chat: str, sender: str) -> bool:
        return chat in self._chats  # a scheduled turn reaches only a connected chat

    def owner_chat(self) -> str | None:
        return next((c for c, name in self._names.items() if name == self.owner), None)
