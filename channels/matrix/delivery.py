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
from typing import TYPE_CHECKING

from loguru import logger

from channels.matrix import client as hs
from channels.matrix.events import content, edit, in_matrix_spelling, measure, split, txn_id
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
GROWING = " …"  # after a reply still being written
# A rate limit this short is waited out in the chat's delivery (its later messages wait behind
# it, as the core would make them); longer, the reply is DeliveryLater with the wait.
RATE_WAIT_S = 10.0
RATE_TRIES = 4


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
        self._streams: dict[str, Stream] = {}
        self._typing: dict[str, asyncio.Task[None]] = {}

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
            text = in_matrix_spelling(text, self.channel.command_names)
        stream = self._streams.pop(msg.chat_id, None)
        if stream is not None and stream.reply_to != msg.reply_to:
            stream = None
        for n, piece in enumerate(split(text or "…")):
            if n == 0 and stream is not None:  # the message it grew in becomes the whole reply
                await self._send(msg.chat_id, edit(stream.event_id, piece), None)
                continue
            event_id = await self._send(msg.chat_id, content(piece), txn_id(msg.seq, n))
            if n == 0 and msg.seq is not None:
                await self._finish_earlier(msg.chat_id, event_id, piece)

    async def _finish_earlier(self, room: str, event_id: str, piece: str) -> None:
        """The part may have gone out as a growing message before a crash (under this config or
        an earlier one): the homeserver then answers with that message, edited to the whole."""
        client = self.channel.client
        if client is None:
            return
        body = await hs.body_of(client, room, event_id)
        if body is not None and body != piece:
            await self._send(room, edit(event_id, piece), None)

    async def _grow(self, msg: OutboundMessage, so_far: str) -> None:
        """Show the reply so far: first as a message (the reply's part 0), then by edits no more
        often than stream_every_s. A rate limit skips an edit: the next one, or the whole
        reply, shows what it missed."""
        room, now = msg.chat_id, time.monotonic()
        shown = split(so_far)[0] + GROWING if so_far else ""
        stream = self._streams.get(room)
        if stream is not None and stream.reply_to != msg.reply_to:
            stream = None
        try:
            if stream is None:
                if not shown:
                    return
                event_id = await self._send(room, content(shown), txn_id(msg.seq, 0), wait=False)
                self._streams[room] = Stream(msg.reply_to, event_id, now, shown)
            elif now - stream.at >= self.stream_every_s and shown != stream.text:
                await self._send(room, edit(stream.event_id, shown), None, wait=False)
                stream.at, stream.text = now, shown
        except DeliveryLater as exc:
            logger.debug("matrix: an edit in {} skipped: {}", room, exc)

    async def _send(
        self, room: str, body: dict[str, object], txn: str | None, *, wait: bool = True
    ) -> str:
        """Send one event; a short rate-limit wait is waited out here (`wait`), a longer one
        is DeliveryLater with the homeserver's wait, as is a homeserver out of reach."""
        attempt = 0
        while True:
            client = self.channel.client
            if client is None:
                raise DeliveryLater("the Matrix channel is not running")
            try:
                return await hs.send(client, room, dict(body), txn)
            except hs.MatrixError as exc:  # refused for good (not in the room, say): logged
                logger.warning("matrix: the homeserver refused a message to {}: {}", room, exc)
                return ""
            except DeliveryLater as exc:
                retry, attempt = exc.retry_in_s, attempt + 1
                if not wait or retry is None or retry > RATE_WAIT_S or attempt == RATE_TRIES:
                    raise
                logger.info("matrix: rate-limited in {}; sending again in {:.1f} s", room, retry)
                await asyncio.sleep(retry)

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
            await self._send(room, content(note), None)
            return
        body: dict[str, object] = {
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
        while (client := self.channel.client) is not None:
            with contextlib.suppress(Exception):  # typing is a courtesy: never fails a reply
                await hs.typing(client, room, True, TYPING_MS)
            await asyncio.sleep(TYPING_EVERY_S)

    def _stop_typing(self, room: str) -> bool:
        task = self._typing.pop(room, None)
        if task is not None:
            task.cancel()
        return task is not None

    async def _typing_off(self, room: str) -> None:
        if self._stop_typing(room) and (client := self.channel.client) is not None:
            with contextlib.suppress(Exception):
                await hs.typing(client, room, False)
