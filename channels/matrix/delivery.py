"""What the core says, delivered to Matrix rooms: replies as HTML with a plain body, split by
the event's bytes, each part under a fixed transaction id; a reply growing by m.replace edits
at a bounded rate; typing while a turn runs; files through the media repository."""

from __future__ import annotations

import asyncio
import contextlib
import mimetypes
import time
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from loguru import logger

from channels.matrix import client as hs
from channels.matrix.events import (
    BANG,
    EVENT_LIMIT,
    content,
    edit,
    measure,
    split,
    txn_id,
)
from nanomem.agent import (
    DeliveryLater,
    Delta,
    File,
    FileGone,
    OutboundMessage,
    Text,
    TurnEnded,
    TurnStarted,
    file_bytes,
    image_suffix,
)

if TYPE_CHECKING:
    from channels.matrix.channel import MatrixChannel


TYPING_MS = 25_000  # each typing notice lasts this long; renewed every TYPING_EVERY_S
TYPING_EVERY_S = 20.0
TYPING_DELAY_S = 1.0
GROWING = " …"  # after a reply still being written


@dataclass
class Stream:
    """One reply growing in a room: the message it grows in, and the last edit's time and text."""

    reply_to: str | None
    event_id: str
    at: float
    text: str


class Delivery:
    def __init__(self, channel: MatrixChannel, *, stream_every_s: float) -> None:
        self.channel, self.stream_every_s = channel, stream_every_s
        self.owner_room: str | None = None
        self.home = ""  # this inbox's mark in transaction ids (set at start)
        self._streams: dict[str, Stream] = {}
        self._typing: dict[str, asyncio.Task[None]] = {}
        self._typed: set[str] = set()  # rooms showing our typing indicator now
        # The first inbox row stored in this run: only a reply to an earlier one can have gone
        # out before (grown under part 0's transaction id by a run that died), so only those
        # are looked at after sending.
        self.first_seq: int | None = None

    measure = staticmethod(measure)

    async def close(self) -> None:
        for room in list(self._typing):
            self._stop_typing(room)

    async def send(self, msg: OutboundMessage) -> None:
        part, room = msg.part, msg.chat_id
        if isinstance(part, TurnStarted):
            self.accepted(room)
        elif isinstance(part, TurnEnded):
            await self._typing_off(room)
        elif isinstance(part, Delta):
            if self._streams_in(room):
                await self._grow(msg, part.so_far)
        elif isinstance(part, Text):
            await self._text(msg, part)
            if msg.is_answer:
                await self._typing_off(room)
        elif isinstance(part, File):
            await self._file(msg, part)
        # Progress lines and a step's end: the growing message already shows the reply.

    def _streams_in(self, room: str) -> bool:
        s = self.channel.settings
        return s.stream_groups if self.channel.known_group(room) else s.stream

    async def _text(self, msg: OutboundMessage, part: Text) -> None:
        text = part.text
        if part.style != "reply" or part.command:  # our own text names commands as typed here
            text = BANG.outbound(text, self.channel.command_names)
        stream = self._streams.pop(msg.chat_id, None)
        if stream is not None and stream.reply_to != msg.reply_to:
            stream = None
        markdown = part.style != "error"  # an error note is plain text
        # Split here, not by the core: each part's transaction id is its number in the reply.
        for n, piece in enumerate(split(text or "…")):
            body = content(piece, markdown=markdown)
            if n == 0 and stream is not None:  # the message it grew in becomes the whole reply
                await self._send(msg.chat_id, edit(stream.event_id, body), None)
                continue
            event_id = await self._send(msg.chat_id, body, txn_id(self.home, msg.seq, n))
            if n == 0 and self._earlier(msg.seq) and event_id:
                await self._finish_earlier(msg.chat_id, event_id, body)

    def _earlier(self, seq: int | None) -> bool:
        return seq is not None and (self.first_seq is None or seq < self.first_seq)

    async def _finish_earlier(self, room: str, event_id: str, body: dict[str, Any]) -> None:
        """The part may have gone out as a growing message before a crash (under this config or
        an earlier one): the homeserver then answers with that message, edited to the whole."""
        client = self.channel.client
        if client is None:
            return
        kept = await hs.body_of(client, room, event_id)
        if kept is not None and kept != body["body"]:
            await self._send(room, edit(event_id, body), None)

    async def _grow(self, msg: OutboundMessage, so_far: str) -> None:
        """Show the reply so far: first as a message (the reply's part 0), then by edits no more
        often than stream_every_s. A rate limit skips an edit: the next one, or the whole
        reply, shows what it missed."""
        room, now = msg.chat_id, time.monotonic()
        stream = self._streams.get(room)
        if stream is not None and stream.reply_to != msg.reply_to:
            stream = None
        due = stream is None or now - stream.at >= self.stream_every_s
        if not so_far.strip() or not due:
            return
        # An edit carries its text twice: what grows is held to half an event.
        shown = split(so_far, EVENT_LIMIT // 2)[0] + GROWING
        try:
            if stream is None:
                event_id = await self._send(room, content(shown), txn_id(self.home, msg.seq, 0))
                self._streams[room] = Stream(msg.reply_to, event_id, now, shown)
            elif shown != stream.text:
                await self._send(room, edit(stream.event_id, content(shown)), None)
                stream.at, stream.text = now, shown
        except DeliveryLater as exc:
            logger.debug("matrix: an edit in {} skipped: {}", room, exc)

    async def _send(self, room: str, body: dict[str, Any], txn: str | None) -> str:
        """Send one event: its id, or "" when the homeserver refused it for good (logged). A
        rate limit or a homeserver out of reach is DeliveryLater (with the homeserver's wait),
        which the core tries again within the run."""
        client = self.channel.client
        if client is None:
            raise DeliveryLater("the Matrix channel is not running")
        try:
            return await hs.send(client, room, body, txn)
        except hs.MatrixError as exc:  # refused for good (not in the room, say): logged
            logger.warning("matrix: the homeserver refused a message to {}: {}", room, exc)
            return ""
        except DeliveryLater as exc:
            if exc.retry_in_s is not None:
                logger.info("matrix: rate-limited in {}: again in {:.1f} s", room, exc.retry_in_s)
            raise

    async def _file(self, msg: OutboundMessage, part: File) -> None:
        """A file from the workspace, uploaded; a file that cannot go is one line instead."""
        client, room = self.channel.client, msg.chat_id
        name = PurePosixPath(part.path).name
        try:
            if client is None:
                raise DeliveryLater("the Matrix channel is not running")
            data = await asyncio.to_thread(file_bytes, self.channel.workspace, part.path)
            if len(data) > self.channel.settings.max_file_mb * 2**20:
                raise FileGone(f"{name} is larger than matrix.max_file_mb")
            image = image_suffix(data) is not None
            mime = mimetypes.guess_type(name)[0] or "application/octet-stream"
            url = await hs.upload(client, data, mime, name)
        except (FileGone, DeliveryLater, hs.MatrixError) as exc:
            note = f"The file {name} could not be sent now: {exc}"
            await self._send(room, content(note, markdown=False), None)
            return
        body: dict[str, Any] = {
            "msgtype": "m.image" if image else "m.file",
            "body": part.caption or name,
            "filename": name,
            "url": url,
            "info": {"size": len(data), "mimetype": mime},
        }
        await self._send(room, body, None)

    def accepted(self, room: str) -> None:
        """A turn begins in `room`: typing until its answer."""
        if room not in self._typing:
            self._typing[room] = asyncio.create_task(self._keep_typing(room), name="matrix-typing")

    async def _keep_typing(self, room: str) -> None:
        await asyncio.sleep(TYPING_DELAY_S)  # an answer by then needs no indicator
        self._typed.add(room)
        while (client := self.channel.client) is not None:
            with contextlib.suppress(Exception):  # typing is a courtesy: never fails a reply
                await hs.typing(client, room, True, TYPING_MS)
            await asyncio.sleep(TYPING_EVERY_S)

    def _stop_typing(self, room: str) -> bool:
        """Stop renewing the indicator; whether one was shown (and is to be taken down)."""
        task = self._typing.pop(room, None)
        if task is not None:
            task.cancel()
        shown = room in self._typed
        self._typed.discard(room)
        return shown

    async def _typing_off(self, room: str) -> None:
        if self._stop_typing(room) and (client := self.channel.client) is not None:
            with contextlib.suppress(Exception):
                await hs.typing(client, room, False)
