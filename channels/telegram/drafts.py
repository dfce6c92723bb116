"""Replies that grow in a Telegram chat while the model writes them (free of python-telegram-bot).

A private chat sees a draft (`sendMessageDraft`, Bot API 9.3+). Where the server does not know
drafts, and in groups, one message is sent with the first text and edited in place; Delivery
turns it into the finished reply. Either way a chat is refreshed at most once per `every_s`
(the first text after FIRST_SHOW_S), waits out its own flood limit only and gives way to any
whole message on its way to the chat (the shared rate gate), and a failure here never costs
the finished reply, which always follows.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from loguru import logger

from channels.telegram.bot_api import BotPort, SendError
from channels.telegram.format import markdown_to_html, split_html, split_plain
from nanomem.agent import MessageBus, RateGate
from nanomem.text.utf8 import clean_text

GROUP_SLOWER = 3
# The first words wait this long: a reply finished by then goes out whole without a draft
# (most short replies), which spares the Bot API a call per chat when many answer at once.
FIRST_SHOW_S = 0.15
CLOSE_WAIT_S = 10.0  # the longest a finished reply waits for a refresh already on its way
# Telegram shows a draft as a "temporary 30-second preview": one older than this is sent again
# under a new id, changed or not, so a long reply (or a long tool call) never leaves the chat
# blank. A new id, not the same one again: it holds whether the 30 s count from a draft's
# first call or from its latest.
DRAFT_RENEW_S = 20.0
_DRAFT_IDS = itertools.count(1)  # must be non-zero; one per step, so a new step replaces it
# The inbox's record of the messages stored messages' replies grow in ({reply_to: [chat, id]}).
GROWN = "telegram.grown"
GROWN_KEPT = 200


# Of a reply being written, what is rendered for its preview (its newest message's worth,
# 4,096 characters, with room to spare): rendering all of a long one at each refresh would
# hold the event loop for seconds.
PREVIEWED = 8000


def preview(markdown: str, *, html: bool) -> str:
    """What to show of a reply being written: its newest part within one message's limit,
    rendered from the end of the Markdown so far (balanced HTML) or as plain text; "" when
    blank."""
    text = clean_text(_tail(markdown))
    parts = split_html(markdown_to_html(text)) if html else split_plain(text)
    return parts[-1] if parts else ""


def _tail(markdown: str) -> str:
    """Its last PREVIEWED characters or so, from a line's start where one is near; a code
    block the cut falls in is opened again, so its end still shows as code."""
    if len(markdown) <= PREVIEWED:
        return markdown
    start = len(markdown) - PREVIEWED
    line = markdown.find("\n", start, start + PREVIEWED // 2)
    cut = line + 1 if line >= 0 else start
    tail = markdown[cut:]
    return "```\n" + tail if markdown.count("```", 0, cut) % 2 else tail


@dataclass(eq=False)
class Stream:
    """One reply being written in one chat."""

    key: str
    private: bool
    quote: int | None = None  # the question a group's first message quotes
    reply_to: str = ""  # the stored message it answers ("" when not stored)
    step: int = 0
    text: str = ""  # the step's Markdown so far
    rendered_from: str | None = None  # the text last shown (None: show it again)
    shown: str = ""  # what the chat shows now
    html: bool = True  # False once Telegram refused our HTML for this reply
    drafts: bool = True  # False once this chat refused a draft
    draft_id: int = 0
    draft_at: float = 0.0  # when the current draft id was first sent (monotonic)
    message_id: int | None = None  # the message edited in place, when not a draft
    next_at: float = 0.0  # no refresh before this (monotonic)
    closed: bool = False  # the finished reply is here: show nothing more
    broken: bool = False  # refused for good: show nothing more
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class Grown:
    """Where each stored message's reply grows by edits, in the inbox's positions: after a
    crash its replay finishes that message rather than posting a second one beside it. (Bots
    cannot read a chat's history: a kill between Telegram's posting of the first text and
    this record still leaves that one message behind.)"""

    def __init__(self) -> None:
        self.bus: MessageBus | None = None
        self._ids: dict[str, tuple[str, int]] = {}

    async def load(self, bus: MessageBus) -> None:
        self.bus = bus
        try:
            kept = json.loads(await bus.position(GROWN) or "{}")
        except ValueError:
            kept = {}
        if isinstance(kept, dict):
            self._ids = {
                str(k): (str(v[0]), v[1])
                for k, v in kept.items()
                if isinstance(v, list) and len(v) == 2 and isinstance(v[1], int)
            }

    def get(self, reply_to: str | None, chat: str) -> int | None:
        found = self._ids.get(reply_to or "")
        return found[1] if found is not None and found[0] == chat else None

    async def keep(self, reply_to: str, chat: str, message_id: int) -> None:
        if reply_to and self._ids.get(reply_to) != (chat, message_id):
            self._ids[reply_to] = (chat, message_id)
            while len(self._ids) > GROWN_KEPT:
                self._ids.pop(next(iter(self._ids)))
            await self._store()

    async def forget(self, reply_to: str | None) -> None:
        if self._ids.pop(reply_to or "", None) is not None:
            await self._store()

    async def _store(self) -> None:
        if self.bus is None:
            return
        kept = json.dumps({k: list(v) for k, v in self._ids.items()})
        try:
            await self.bus.receive("telegram", [], (GROWN, kept))
        except Exception as exc:  # an aid after a crash, never worth a reply
            logger.warning("telegram: could not record where a reply grows: {}", exc)


class Streamer:
    """Keeps each stream's chat up to date from a task of its own, throttled per chat."""

    def __init__(
        self,
        port: BotPort,
        gate: RateGate,
        every_s: float,
        renew_s: float = DRAFT_RENEW_S,
        posted: Callable[[Stream], Awaitable[None]] | None = None,
    ) -> None:
        self.port, self.gate, self.every_s, self.renew_s = port, gate, every_s, renew_s
        self.drafts: bool | None = None  # whether the Bot API server knows drafts (per process)
        self._posted = posted  # told of the message a stream grows in, once posted

    def piece(self, stream: Stream, step: int, text: str) -> None:
        """The step's text so far; a new step starts a new text (and a new draft)."""
        if stream.closed:
            return
        if step != stream.step:
            stream.step, stream.draft_id = step, 0
        stream.text = text
        stream.wake.set()
        if stream.task is None:
            stream.next_at = max(stream.next_at, time.monotonic() + FIRST_SHOW_S)
            run = self._run(stream)
            stream.task = asyncio.create_task(run, name=f"telegram-stream:{stream.key}")

    def stop(self, stream: Stream) -> None:
        stream.closed = True
        stream.wake.set()

    async def finished(self, stream: Stream) -> None:
        """Stop the stream and wait for a refresh already sent, so none lands after the reply."""
        self.stop(stream)
        if stream.task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(stream.task), CLOSE_WAIT_S)
        except TimeoutError:
            stream.task.cancel()

    def cancel(self, stream: Stream) -> None:
        self.stop(stream)
        if stream.task is not None:
            stream.task.cancel()

    async def _run(self, stream: Stream) -> None:
        while not (stream.closed or stream.broken):
            renew_in = self._renew_in(stream)
            if renew_in == 0:  # the draft would soon vanish: show the text again, as a new one
                stream.draft_id, stream.rendered_from, stream.shown = 0, None, ""
            if stream.text == stream.rendered_from:
                await _sleep(stream, renew_in)
                continue
            ready_in = self.gate.edit_in_s(stream.key)  # a flood wait, a reply on its way
            if (delay := max(stream.next_at - time.monotonic(), ready_in)) > 0:
                await _sleep(stream, delay)
                continue
            text, html = stream.text, stream.html
            # Groups allow about 20 messages a minute, edits included: refresh them less often.
            every = self.every_s if stream.private else self.every_s * GROUP_SLOWER
            stream.rendered_from, stream.next_at = text, time.monotonic() + every
            try:
                await self._show(stream, preview(text, html=html), html)
            except SendError as exc:
                self._failed(stream, exc, html)
            except Exception:  # best effort: the finished reply still comes
                logger.exception("telegram: showing a reply as it grows in {} failed", stream.key)
                stream.broken = True

    def _renew_in(self, stream: Stream) -> float | None:
        """Seconds until the draft shown must be sent anew; None when no draft is shown."""
        if not (stream.draft_id and stream.shown and self._drafting(stream)):
            return None
        return max(0.0, stream.draft_at + self.renew_s - time.monotonic())

    async def _show(self, stream: Stream, body: str, html: bool) -> None:
        if not body or body == stream.shown:
            return
        if self._drafting(stream):
            if not stream.draft_id:
                stream.draft_id, stream.draft_at = next(_DRAFT_IDS), time.monotonic()
            await self.port.send_draft(stream.key, stream.draft_id, body, html=html)
            self.drafts = True
        elif stream.message_id is None:
            stream.message_id = await self.port.send_text(
                stream.key, body, html=html, reply_to=stream.quote
            )
            if self._posted is not None:
                await self._posted(stream)
        else:
            await self.port.edit_text(stream.key, stream.message_id, body, html=html)
        stream.shown = body

    def _drafting(self, stream: Stream) -> bool:
        """Whether this stream shows drafts (private, known to the server, not yet edits)."""
        private = stream.private and stream.drafts and not stream.message_id
        return private and self.drafts is not False

    def _failed(self, stream: Stream, exc: SendError, html: bool) -> None:
        stream.rendered_from = None  # unless given up below, the text is shown again
        if exc.retry_after is not None:  # this chat waits; no other chat does
            self.gate.block(stream.key, exc.retry_after + 0.5)
            logger.warning(
                "telegram: flood control for chat {}: waiting {:.0f} s", stream.key, exc.retry_after
            )
        elif exc.unsupported and stream.private and not stream.message_id:
            if self.drafts is not False:
                logger.info("telegram: the Bot API server has no drafts; replies grow by edits")
            self.drafts, stream.next_at = False, 0.0
        elif exc.bad_html and html:
            logger.warning("telegram: Telegram refused the HTML of a growing reply ({})", exc)
            stream.html, stream.next_at = False, 0.0
        elif exc.not_modified:
            stream.rendered_from = stream.text
        elif exc.transient:
            logger.debug("telegram: a growing reply in {} not refreshed: {}", stream.key, exc)
        elif stream.private and stream.drafts and not stream.message_id:
            logger.info("telegram: chat {} refused a draft ({}); it gets edits", stream.key, exc)
            stream.drafts, stream.next_at = False, 0.0
        else:
            logger.warning(
                "telegram: stopped showing a reply as it grows in {}: {}", stream.key, exc
            )
            stream.broken = True


async def _sleep(stream: Stream, seconds: float | None) -> None:
    """Until something changes (a piece, the end) or `seconds` pass."""
    stream.wake.clear()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stream.wake.wait(), seconds)
