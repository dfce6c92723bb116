"""What the core sends, posted to Slack: whole messages in mrkdwn (in the thread they answer),
choices as Block Kit buttons, a reply growing by `chat.update` at a bounded rate where it
streams, files by Slack's external upload. The turns' bookkeeping is the core's `Turns`, the
rate limits its `RateGate`; a whole message Slack refuses with 429 is a `DeliveryLater` with
Slack's wait, which the core sends again within the run."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loguru import logger

from channels.slack.events import target
from channels.slack.web import SendError, call, upload
from nanomem.agent import (
    Button,
    DeliveryLater,
    Delta,
    DeltaEnd,
    File,
    FileGone,
    MessageBus,
    OutboundMessage,
    Question,
    RateGate,
    Text,
    TurnEnded,
    Turns,
    TurnStarted,
    file_bytes,
)
from nanomem.text.mrkdwn import render_mrkdwn

if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient

SECTION_LIMIT = 3000  # a Block Kit section's text
SECTIONS_KEPT = 49  # a message holds 50 blocks: the buttons' row, and the words before it
LABEL_LIMIT = 75  # a button's text
VALUE_LIMIT = 2000  # a button's value
CHOOSE = "Choose:"
# The inbox's record of replies growing now ({reply_to: [chat, ts]}): after a crash, the
# message a reply had begun to grow in is finished, not left half-written beside a second one.
GROWN = "slack.grown"
GROWN_KEPT = 200
# The inbox's record of stored replies whose parts began to go out ({seq: [chat, after]}): one
# sent again after a restart looks first for the parts Slack already shows (each message of a
# stored reply carries its seq and part in Slack's message metadata, with this home's mark, so
# two homes on one bot never take each other's for their own).
SENDING = "slack.sending"
MARK = "slack.mark"
REPLY_EVENT = "nanomem_reply"
# Of a growing reply, what is rendered for its preview (its pieces replace it, 3,900 each):
# rendering all of a long one each time would hold the event loop for seconds.
PREVIEWED = 8000
# A reply's first words wait this long before they are posted to grow: a reply done by then
# goes out whole, in one post, with no update after it and no notes in the inbox (most short
# replies; Telegram's drafts wait as long).
FIRST_SHOW_S = 0.15
# Looking for our own posts since a time: pages of 200 (Slack's advice), this many at most.
HISTORY_PAGES = 10


@dataclass(eq=False)
class _Stream:
    """A reply growing in one message: where it is (no ts before its first post), what it shows."""

    ts: str = ""
    shown: str = ""
    looked: bool = False  # for the message a run before began it in
    text: str = ""  # the step's words so far
    began: float = field(default_factory=time.monotonic)
    first: asyncio.Task[None] | None = None  # its first post, due FIRST_SHOW_S after `began`
    posting: bool = False  # that post is on its way


async def _settled(stream: _Stream) -> None:
    """Its first post dropped while it waits, or waited for while it is on its way (what
    follows then finishes that message, never a second)."""
    first = stream.first
    if first is None or first.done():
        return
    if not stream.posting:
        first.cancel()
    await asyncio.gather(first, return_exceptions=True)


def escape(text: str) -> str:
    """Plain text as Slack shows it literally (its only three control characters)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def sections(text: str) -> list[str]:
    """The text (mrkdwn already) in pieces a section takes, cut at a line's end where one is
    near: words and choices then go in one message, one call (a part sent again after a rate
    limit never shows its words twice)."""
    pieces = []
    while len(text) > SECTION_LIMIT:
        cut = text.rfind("\n", SECTION_LIMIT // 2, SECTION_LIMIT)
        cut = cut if cut > 0 else SECTION_LIMIT
        pieces.append(text[:cut])
        text = text[cut:].lstrip("\n")
    return [*pieces, text]


def blocks_for(text: str, buttons: tuple[Button, ...]) -> list[dict[str, Any]]:
    """Sections with the text (mrkdwn already), then the buttons, each sending its command."""
    elements = [
        {
            "type": "button",
            "action_id": f"nanomem-{n}",
            "text": {"type": "plain_text", "text": b.label[:LABEL_LIMIT] or "…", "emoji": True},
            "value": b.command[:VALUE_LIMIT],
        }
        for n, b in enumerate(buttons[:25])
    ]
    shown = [
        {"type": "section", "text": {"type": "mrkdwn", "text": piece}}
        for piece in sections(text or CHOOSE)[:SECTIONS_KEPT]
    ]
    return [*shown, {"type": "actions", "elements": elements}]


class Delivery:
    """Per chat, what the core sends, in the core's order (it calls one chat at a time)."""

    def __init__(
        self,
        client: AsyncWebClient,
        workspace: Path,
        *,
        streams_in: Callable[[str], bool],
        stream_every_s: float = 1.2,
        first_show_s: float = FIRST_SHOW_S,
    ) -> None:
        self.client, self.workspace = client, workspace
        self.first_show_s = first_show_s
        self._streams_in = streams_in  # does this chat see replies grow (DMs, or groups too)?
        self.stream_every_s = stream_every_s  # chat.update is Tier 3: about 50 a minute
        self.gate = RateGate()
        self.turns: Turns[_Stream] = Turns()  # no typing: Slack gives apps none
        self.bus: MessageBus | None = None
        # A stored message's reply_to → [chat, ts, after]: ts "" while its first post is on
        # its way (sent after `after`, a Slack timestamp).
        self._grown: dict[str, list[str]] = {}
        self.bot_user = ""  # our own member id (auth.test): whose posts are ours
        self._sending: dict[str, list[str]] = {}  # SENDING
        self._began: set[int] = set()  # stored replies whose parts go out in this run
        self._parts: dict[int, int] = {}  # of each, the parts shown so far in this run
        self._shown: dict[int, set[int]] = {}  # of those a run before began: parts Slack shows
        self.mark = ""  # this home's (MARK)

    async def load(self, bus: MessageBus) -> None:
        self.bus = bus
        try:
            grown = json.loads(await bus.position(GROWN) or "{}")
        except ValueError:
            grown = {}
        if isinstance(grown, dict):
            self._grown = {
                str(k): [str(x) for x in v]
                for k, v in grown.items()
                if isinstance(v, list) and len(v) == 3
            }
        try:
            sending = json.loads(await bus.position(SENDING) or "{}")
        except ValueError:
            sending = {}
        if isinstance(sending, dict):
            self._sending = {
                str(k): [str(x) for x in v]
                for k, v in sending.items()
                if isinstance(v, list) and len(v) == 2
            }
        self.mark = await bus.position(MARK) or ""
        if not self.mark:
            self.mark = uuid.uuid4().hex
            await bus.receive("slack", [], (MARK, self.mark))

    async def send(self, msg: OutboundMessage) -> None:
        part = msg.part
        if isinstance(part, TurnStarted):
            self.turns.started(msg)
            return
        if isinstance(part, TurnEnded):  # a reply /stop cut short stays as it was shown
            if (cut := self.turns.ended(msg)) is not None:
                await _settled(cut)
                await self._keep_grown(msg, None)
            self.turns.forget_if_idle(msg.chat_id)
            return
        try:
            if isinstance(part, Text):
                await self._text(msg, part)
            elif isinstance(part, Question):
                await self._answer(msg, escape(part.text), part.choices)
            elif isinstance(part, Delta):
                await self._grow(msg, part.so_far)
            elif isinstance(part, DeltaEnd):  # a tool runs next: its words stay in their message
                await self._step_ended(msg)
            elif isinstance(part, File):
                await self._file(msg, part)
        except SendError as exc:
            if isinstance(part, Delta):  # the whole reply follows: a piece is no loss
                logger.debug("slack: a piece of a reply to {} was not shown: {}", msg.chat_id, exc)
                return
            if exc.retry_in_s is not None:
                self.gate.block(msg.chat_id, exc.retry_in_s)
            if exc.transient:
                raise DeliveryLater(str(exc), retry_in_s=exc.retry_in_s) from None
            logger.warning("slack: a message to {} was refused for good: {}", msg.chat_id, exc)

    async def _text(self, msg: OutboundMessage, part: Text) -> None:
        shown = escape(part.text) if part.style == "error" else render_mrkdwn(part.text)
        if msg.seq is not None and msg.is_answer and msg.seq not in self._began:
            await self._begin(msg, msg.seq)
        stream = self.turns.answering(msg)
        if stream is not None:
            await _settled(stream)
        stream = stream or await self._grown_before(msg)
        if stream is not None and stream.ts and not part.buttons:  # the grown message: the reply
            try:
                async with self.gate.reply(msg.chat_id):
                    await self._update(msg.chat_id, stream.ts, shown, metadata=self._meta(msg))
            except SendError:  # sent again (within the run): it finishes the same message
                if msg.reply_to is not None:
                    self.turns.chat(msg.chat_id).streams[msg.reply_to] = stream
                raise
            self._shown_part(msg)
        else:
            async with self.gate.reply(msg.chat_id):
                await self._answer(msg, shown, part.buttons)
        await self._keep_grown(msg, None)

    async def _answer(self, msg: OutboundMessage, text: str, buttons: tuple[Button, ...]) -> None:
        """A part of a whole reply, posted once: a stored reply's part that a run before
        already posted (found by its metadata) is not posted again."""
        if msg.seq is not None and msg.is_answer:
            if msg.seq not in self._began:
                await self._begin(msg, msg.seq)
            if self._parts.get(msg.seq, 0) in self._shown.get(msg.seq, set()):
                self._shown_part(msg)
                return
        await self._post(msg.chat_id, text, buttons, metadata=self._meta(msg))
        self._shown_part(msg)

    async def _begin(self, msg: OutboundMessage, seq: int) -> None:
        """The first part of a stored reply in this run: if a run before began it, which of
        its parts Slack shows; else noted (before its first post) with the time to look from."""
        key = str(seq)
        found = self._sending.get(key)
        if found is not None and found[0] == msg.chat_id:
            ours = await self._ours_since(msg.chat_id, found[1], metadata=True)
            self._shown[seq] = {
                int(payload["part"])
                for m in ours
                if isinstance(payload := (m.get("metadata") or {}).get("event_payload"), dict)
                and payload.get("home") == self.mark
                and payload.get("seq") == seq
                and isinstance(payload.get("part"), int)
            }
        else:
            grown = self._grown.get(msg.reply_to or "")
            after = f"{time.time() - 1:.6f}"
            if grown is not None and grown[2]:  # its first part finishes a message begun then
                after = min(after, grown[2], key=float)
            self._sending[key] = [msg.chat_id, after]
            while len(self._sending) > GROWN_KEPT:
                self._sending.pop(next(iter(self._sending)))
            if self.bus is not None:
                await self.bus.receive("slack", [], (SENDING, json.dumps(self._sending)))
        self._began.add(seq)

    def _shown_part(self, msg: OutboundMessage) -> None:
        if msg.seq is not None and msg.is_answer:
            self._parts[msg.seq] = self._parts.get(msg.seq, 0) + 1

    def _meta(self, msg: OutboundMessage) -> dict[str, Any] | None:
        """Slack's message metadata naming the stored reply's part a message shows."""
        if msg.seq is None or not msg.is_answer or not self.mark:
            return None
        payload = {"home": self.mark, "seq": msg.seq, "part": self._parts.get(msg.seq, 0)}
        return {"event_type": REPLY_EVENT, "event_payload": payload}

    async def _post(
        self,
        chat: str,
        text: str,
        buttons: tuple[Button, ...] = (),
        *,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        channel, thread = target(chat)
        params: dict[str, Any] = {"channel": channel, "text": text or "…", "mrkdwn": True}
        params |= {"unfurl_links": False, "unfurl_media": False}
        if thread is not None:
            params["thread_ts"] = thread
        if buttons:
            params["blocks"] = blocks_for(text, buttons)
        if metadata is not None:
            params["metadata"] = metadata
        answer = await call(self.client, "chat.postMessage", **params)
        return str(answer.get("ts", ""))

    async def _update(
        self,
        chat: str,
        ts: str,
        text: str,
        blocks: Any = None,
        *,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        params: dict[str, Any] = {"channel": target(chat)[0], "ts": ts, "text": text or "…"}
        if blocks is not None:
            params["blocks"] = blocks
        if metadata is not None:
            params["metadata"] = metadata
        await call(self.client, "chat.update", **params)

    async def _step_ended(self, msg: OutboundMessage) -> None:
        chat = self.turns.chat(msg.chat_id)
        stream = chat.streams.get(msg.reply_to or "")
        if stream is not None:
            await _settled(stream)
        if stream is not None and not stream.ts and stream.text:  # words held back a moment
            try:
                await self._grow(msg, stream.text, first_wait=False)
            except SendError as exc:
                logger.debug("slack: a step's words in {} were not shown: {}", msg.chat_id, exc)
        if chat.streams.pop(msg.reply_to or "", None) is not None:
            await self._keep_grown(msg, None)

    async def _grow(self, msg: OutboundMessage, so_far: str, *, first_wait: bool = True) -> None:
        """A piece of the reply (the core merges those that wait): shown by editing one
        message, at most once per interval (the first after FIRST_SHOW_S); a piece due sooner
        is skipped, the next one shows the whole text so far."""
        if not self._streams_in(msg.chat_id) or not so_far.strip():
            return
        stream = self.turns.growing(msg, _Stream)
        if stream is None:
            return
        stream.text = so_far
        if not stream.looked:
            stream.looked = True
            if (before := await self._grown_before(msg)) is not None:
                stream.ts = before.ts
        waiting = stream.first is None or not stream.first.done()
        if not stream.ts and first_wait and self.first_show_s > 0 and waiting:
            if stream.first is None:  # the first post waits, in a task of its own
                wait = stream.began + self.first_show_s - time.monotonic()
                show = self._show_first(msg, stream, wait)
                stream.first = asyncio.create_task(show, name=f"slack-first:{msg.chat_id}")
            return
        if self.gate.edit_in_s(msg.chat_id) > 0:
            return
        shown = render_mrkdwn(so_far[:PREVIEWED])
        if shown == stream.shown:
            return
        self.gate.edited(msg.chat_id, self.stream_every_s)
        if stream.ts:
            await self._update(msg.chat_id, stream.ts, shown)
        else:  # noted before and after: a crash between leaves a message we can find again
            await self._keep_grown(msg, "", after=f"{time.time() - 1:.6f}")
            stream.ts = await self._post(msg.chat_id, shown)
            await self._keep_grown(msg, stream.ts)
        stream.shown = shown

    async def _show_first(self, msg: OutboundMessage, stream: _Stream, wait: float) -> None:
        """The words so far, posted once the reply is still being written after the wait
        (`_settled` drops this while it waits: the reply came first)."""
        await asyncio.sleep(max(wait, self.gate.edit_in_s(msg.chat_id), 0.0))
        if (held := self.gate.edit_in_s(msg.chat_id)) > 0:  # another edit in the chat meanwhile
            await asyncio.sleep(held)
        stream.posting = True
        try:
            await self._grow(msg, stream.text, first_wait=False)
        except SendError as exc:
            logger.debug("slack: a piece of a reply to {} was not shown: {}", msg.chat_id, exc)
        except Exception:  # its own task: the reply still comes
            logger.exception("slack: showing a reply as it grows in {} failed", msg.chat_id)

    async def _grown_before(self, msg: OutboundMessage) -> _Stream | None:
        """The message a run before this one began to grow this reply in: as noted, or, when
        it died while Slack took the first post, our first post in the chat since then."""
        found = self._grown.get(msg.reply_to or "") if msg.seq is not None else None
        if not found or found[0] != msg.chat_id:
            return None
        chat, ts, after = found
        if not ts:
            ours = await self._ours_since(chat, after)
            ts = min((str(m["ts"]) for m in ours), key=float, default="")
        return _Stream(ts) if ts else None

    async def _ours_since(
        self, chat: str, after: str, *, metadata: bool = False
    ) -> list[dict[str, Any]]:
        """Our posts in this chat (its thread) after `after` (with their metadata if asked),
        page by page up to HISTORY_PAGES; those found so far when Slack cannot say more."""
        channel, thread = target(chat)
        params: dict[str, Any] = {"channel": channel, "oldest": after, "limit": 200}
        method = "conversations.history"
        if thread is not None:
            method, params = "conversations.replies", params | {"ts": thread}
        if metadata:
            params["include_all_metadata"] = True
        messages: list[Any] = []
        for _ in range(HISTORY_PAGES):
            try:
                answer = await call(self.client, method, **params)
            except SendError as exc:
                logger.debug("slack: could not look for a reply begun in {}: {}", chat, exc)
                break
            said = answer.get("messages")
            messages += said if isinstance(said, list) else []
            meta = answer.get("response_metadata")
            cursor = meta.get("next_cursor") if isinstance(meta, dict) else None
            if not answer.get("has_more") or not isinstance(cursor, str) or not cursor:
                break
            params["cursor"] = cursor
        else:
            logger.warning(
                "slack: a reply begun before a restart was looked for in the newest {} pages of "
                "{}'s history only",
                HISTORY_PAGES,
                chat,
            )
        return [
            m
            for m in messages
            if isinstance(m, dict)
            and m.get("user") == self.bot_user
            and m.get("ts") != thread
            and "ts" in m
        ]

    async def _keep_grown(self, msg: OutboundMessage, ts: str | None, after: str = "") -> None:
        """Record (or, with None, forget) where a stored message's reply grows, in the inbox."""
        if msg.reply_to is None or msg.seq is None:
            return
        if ts is None:
            if self._grown.pop(msg.reply_to, None) is None:
                return
        else:
            kept = self._grown.get(msg.reply_to)
            since = after or (kept[2] if kept else "")
            self._grown[msg.reply_to] = [msg.chat_id, ts, since]
            while len(self._grown) > GROWN_KEPT:
                self._grown.pop(next(iter(self._grown)))
        if self.bus is not None:
            await self.bus.receive("slack", [], (GROWN, json.dumps(self._grown)))

    async def _file(self, msg: OutboundMessage, part: File) -> None:
        channel, thread = target(msg.chat_id)
        name = Path(part.path).name
        try:
            data = await asyncio.to_thread(file_bytes, self.workspace, part.path)
        except FileGone as exc:
            await self._post(msg.chat_id, escape(f"The file {name} could not be sent: {exc}"))
            return
        try:
            async with self.gate.reply(msg.chat_id):
                # Slack reads the caption as a message's text: mrkdwn, so it never pings.
                caption = render_mrkdwn(part.caption) if part.caption else ""
                await upload(self.client, channel, thread, name, data, caption)
        except SendError as exc:
            # A file is in no inbox: said in one line rather than dropped unseen.
            await self._post(msg.chat_id, escape(f"The file {name} could not be sent now: {exc}"))

    async def clear_buttons(self, chat: str, ts: str, text: str) -> None:
        """A choice was made: the buttons go, so nobody presses them twice."""
        section = [{"type": "section", "text": {"type": "mrkdwn", "text": text or "…"}}]
        try:
            await self._update(chat, ts, text, section)
        except SendError as exc:
            logger.debug("slack: could not remove the buttons in {}: {}", chat, exc)
