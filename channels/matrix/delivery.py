"""What the core says, delivered to Matrix rooms: replies as HTML with a plain body, split by
the event's bytes, each part under a fixed transaction id; a reply growing by m.replace edits
at a bounded rate; typing while a turn runs; files through the media repository."""

from __future__ import annotations

import asyncio
import contextlib
import mimetypes
import time
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from loguru import logger

from channels.matrix import client as hs
from channels.matrix.events import (
    BANG,
    GROWN_LIMIT,
    content,
    edit,
    growing,
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
    RateGate,
    Text,
    TurnEnded,
    Turns,
    TurnStarted,
    TypingPace,
    file_bytes,
    image_suffix,
)

if TYPE_CHECKING:
    from channels.matrix.channel import MatrixChannel


TYPING_MS = 25_000  # each typing notice lasts this long; renewed every 20 s while a turn runs
TYPING = TypingPace(delay_s=1.0, every_s=20.0, silent_max_s=600.0)
GROWING = " …"  # after a reply still being written
# A reply's first words wait this long: one written by then (most short replies) goes whole,
# as one event, where a growing one costs the homeserver two or more (the message and its
# edits, each stored): with 100 chats answering at once, half its events.
FIRST_SHOW_S = 1.0
# Edits across all rooms, a second: when many replies grow at once, each grows in fewer, larger
# steps instead of the homeserver storing an edit per room every stream_every_s.
EDITS_PER_S = 10.0
CLOSE_WAIT_S = 10.0  # the longest a whole reply waits for its growing message's post or edit


@dataclass(eq=False)
class Stream:
    """One reply growing in a room: the message it grows in (the reply's part 0) and its text."""

    room: str
    txn: str | None  # part 0's transaction id: the growing message is that part
    text: str = ""  # the reply so far (Markdown)
    shown_from: str | None = None  # the text the message was last made from
    shown: str = ""  # what it shows
    event_id: str = ""  # "" before its first post
    next_at: float = 0.0  # no post or edit before this (monotonic)
    closed: bool = False  # the whole reply is here, or the turn ended: nothing more is shown
    unsure: bool = False  # its first post was cut off on its way: the homeserver may have it
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class Delivery:
    def __init__(self, channel: MatrixChannel, *, stream_every_s: float) -> None:
        self.channel, self.stream_every_s = channel, stream_every_s
        self.owner_room: str | None = None
        self.home = ""  # this inbox's mark in transaction ids (set at start)
        self.gate = RateGate(edits_per_s=EDITS_PER_S)
        self.turns: Turns[Stream] = Turns(self._typing, TYPING, self.gate.wait_s)
        self._typed: set[str] = set()  # rooms shown our typing indicator since their turn began
        # The first inbox row stored in this run: only a reply to an earlier one can have gone
        # out before (grown under part 0's transaction id by a run that died), so only those
        # are looked at after sending.
        self.first_seq: int | None = None

    measure = staticmethod(measure)

    async def close(self) -> None:
        for stream in self.turns.close():
            stream.closed = True
            if stream.task is not None:
                stream.task.cancel()

    async def send(self, msg: OutboundMessage) -> None:
        part, room = msg.part, msg.chat_id
        if isinstance(part, TurnStarted):
            self.turns.started(msg)
        elif isinstance(part, TurnEnded):
            if (cut := self.turns.ended(msg)) is not None:
                await self._keep_shown(cut)  # a turn /stop cut short: what was shown stays
            await self._turn_over(room)
        elif isinstance(part, Delta):
            self._grow(msg, part.so_far)
        elif isinstance(part, Text):
            try:
                await self._text(msg, part)
            finally:
                if msg.is_answer:
                    await self._turn_over(room)
        elif isinstance(part, File):
            await self._file(msg, part)
        # Progress lines and a step's end: the growing message already shows the reply.

    def _streams_in(self, room: str) -> bool:
        s = self.channel.settings
        return s.stream_groups if self.channel.known_group(room) else s.stream

    async def _text(self, msg: OutboundMessage, part: Text) -> None:
        room, text = msg.chat_id, part.text
        if part.style != "reply" or part.command:  # our own text names commands as typed here
            text = BANG.outbound(text, self.channel.command_names)
        stream = self.turns.answering(msg)
        if stream is not None:
            await self._settled(stream)
        markdown = part.style != "error"  # an error note is plain text
        # Split here, not by the core: each part's transaction id is its number in the reply.
        for n, piece in enumerate(split(text or "…")):
            body = content(piece, markdown=markdown)
            try:
                async with self.gate.reply(room):
                    if n == 0 and stream is not None and stream.event_id:
                        # The message it grew in becomes the reply's first part.
                        await self._send(room, edit(stream.event_id, body), None)
                        continue
                    event_id = await self._send(room, body, txn_id(self.home, msg.seq, n))
            except DeliveryLater:
                if n == 0 and stream is not None and msg.reply_to is not None:
                    # Sent again by the core: it finishes the same message, not a second one.
                    self.turns.chat(room).streams[msg.reply_to] = stream
                raise
            unsure = stream is not None and stream.unsure
            if n == 0 and event_id and (unsure or self._earlier(msg.seq)):
                await self._finish_earlier(room, event_id, body)

    def _earlier(self, seq: int | None) -> bool:
        return seq is not None and (self.first_seq is None or seq < self.first_seq)

    async def _finish_earlier(self, room: str, event_id: str, body: dict[str, Any]) -> None:
        """The part may have gone out as a growing message before (by a run that died, or a
        post cut off on its way): the homeserver then answers with that message, edited to
        the whole."""
        client = self.channel.client
        if client is None:
            return
        kept = await hs.body_of(client, room, event_id)
        if kept is not None and kept != body["body"]:
            await self._send(room, edit(event_id, body), None)

    # Growing replies: best effort, from a task of each stream's own, never waited for by the
    # chat; the whole reply replaces what they showed.

    def _grow(self, msg: OutboundMessage, so_far: str) -> None:
        if not self._streams_in(msg.chat_id) or not so_far.strip():
            return
        txn = txn_id(self.home, msg.seq, 0)
        stream = self.turns.growing(msg, lambda: Stream(msg.chat_id, txn))
        if stream is None or stream.closed:
            return  # answered already
        stream.text = so_far
        stream.wake.set()
        if stream.task is None:
            stream.next_at = time.monotonic() + FIRST_SHOW_S
            stream.task = asyncio.create_task(self._show(stream), name="matrix-stream")

    async def _show(self, stream: Stream) -> None:
        """Post the growing message, then edit it: each chat no more often than
        stream_every_s, the channel no more than EDITS_PER_S, never while a whole message is on
        its way; each time the newest text (what it missed meanwhile is never shown)."""
        room = stream.room
        while not stream.closed:
            if stream.shown and len(stream.shown_from or "") >= GROWN_LIMIT:
                return  # it shows all its part can: the rest comes with the whole reply
            if stream.text == stream.shown_from:
                await _woken(stream, None)
                continue
            delay = max(stream.next_at - time.monotonic(), self.gate.edit_in_s(room))
            if delay > 0:
                await _woken(stream, delay)
                continue
            stream.shown_from = text = stream.text
            shown = growing(text) + GROWING
            if shown == stream.shown:
                continue
            self.gate.edited(room, self.stream_every_s)
            stream.next_at = time.monotonic() + self.stream_every_s
            try:
                if stream.event_id:
                    await self._send(room, edit(stream.event_id, content(shown)), None)
                elif not (event_id := await self._send(room, content(shown), stream.txn)):
                    return  # refused for good (logged): the whole reply is posted instead
                else:
                    stream.event_id = event_id
                stream.shown = shown
            except DeliveryLater as exc:  # skipped: a later edit, or the reply, shows it
                logger.debug("matrix: a growing reply in {} not shown now: {}", room, exc)
                stream.shown_from = None
            except Exception:  # best effort: the whole reply still goes
                logger.exception("matrix: showing a growing reply in {} failed", room)
                stream.unsure = not stream.event_id  # its post may have reached the homeserver
                return

    async def _settled(self, stream: Stream) -> None:
        """Stop growing, once what is on its way has arrived (or may have: `unsure`)."""
        stream.closed = True
        stream.wake.set()
        if stream.task is None or stream.task.done():
            return
        with contextlib.suppress(Exception):  # its own failure was logged where it failed
            try:
                await asyncio.wait_for(asyncio.shield(stream.task), CLOSE_WAIT_S)
            except TimeoutError:
                stream.task.cancel()
                stream.unsure = not stream.event_id

    async def _keep_shown(self, stream: Stream) -> None:
        """A turn /stop cut short: its message shows what was written, without the mark of a
        reply still growing."""
        await self._settled(stream)
        if stream.event_id and stream.shown_from:
            with contextlib.suppress(DeliveryLater):
                body = content(growing(stream.shown_from))
                await self._send(stream.room, edit(stream.event_id, body), None)

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
                self.gate.block(room, exc.retry_in_s)
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
            where = await hs.upload(client, room, data, mime, name)
        except (FileGone, DeliveryLater, hs.MatrixError) as exc:
            note = f"The file {name} could not be sent now: {exc}"
            await self._send(room, content(note, markdown=False), None)
            return
        body: dict[str, Any] = {
            "msgtype": "m.image" if image else "m.file",
            "body": part.caption or name,
            "filename": name,
            **where,
            "info": {"size": len(data), "mimetype": mime},
        }
        await self._send(room, body, None)

    async def _typing(self, room: str) -> None:
        """One typing notice (the shared Turns paces them while a turn runs)."""
        if (client := self.channel.client) is None:
            return
        self._typed.add(room)
        await hs.typing(client, room, True, TYPING_MS)

    async def _turn_over(self, room: str) -> None:
        """Nobody waits in the room any more: a typing indicator shown is taken down."""
        if self.turns.waiting(room):
            return
        self.turns.forget_if_idle(room)
        if room in self._typed and (client := self.channel.client) is not None:
            self._typed.discard(room)
            with contextlib.suppress(Exception):  # typing is a courtesy: never fails a reply
                await hs.typing(client, room, False)


async def _woken(stream: Stream, within_s: float | None) -> None:
    """Until the stream has news (a piece, its end) or `within_s` seconds pass."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stream.wake.wait(), within_s)
    stream.wake.clear()
