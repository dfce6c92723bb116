"""What the core sends, posted to Slack: whole messages in mrkdwn (in the thread they answer),
choices as Block Kit buttons, a reply growing by `chat.update` at a bounded rate where it
streams, files by Slack's external upload. A rate limit is a `DeliveryLater` with Slack's wait."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loguru import logger
from slack_sdk.web.async_client import AsyncWebClient

from channels.slack import mrkdwn
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
    Text,
    file_bytes,
)

SECTION_LIMIT = 3000  # a Block Kit section's text
LABEL_LIMIT = 75  # a button's text
VALUE_LIMIT = 2000  # a button's value
CHOOSE = "Choose:"
# The inbox's record of replies growing now ({reply_to: [chat, ts]}): after a crash, the
# message a reply had begun to grow in is finished, not left half-written beside a second one.
GROWN = "slack.grown"
GROWN_KEPT = 200


@dataclass
class _Stream:
    """A reply growing in one message: where it is, what it shows, when it last changed."""

    ts: str
    shown: str
    at: float


def blocks_for(text: str, buttons: tuple[Button, ...]) -> list[dict[str, Any]]:
    """A section with the text (mrkdwn already), then the buttons, each sending its command."""
    elements = [
        {
            "type": "button",
            "action_id": f"nanomem-{n}",
            "text": {"type": "plain_text", "text": b.label[:LABEL_LIMIT] or "…", "emoji": True},
            "value": b.command[:VALUE_LIMIT],
        }
        for n, b in enumerate(buttons[:25])
    ]
    section = text if len(text) <= SECTION_LIMIT else CHOOSE
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": section or CHOOSE}},
        {"type": "actions", "elements": elements},
    ]


class Delivery:
    """Per chat, what the core sends, in the core's order (it calls one chat at a time)."""

    def __init__(
        self,
        client: AsyncWebClient,
        workspace: Path,
        *,
        streams_in: Callable[[str], bool],
        stream_every_s: float = 1.2,
    ) -> None:
        self.client, self.workspace = client, workspace
        self._streams_in = streams_in  # does this chat see replies grow (DMs, or groups too)?
        self.stream_every_s = stream_every_s  # chat.update is Tier 3: about 50 a minute
        self._streams: dict[tuple[str, str | None], _Stream] = {}
        self.bus: MessageBus | None = None
        self._grown: dict[str, list[str]] = {}  # a stored message's reply_to → [chat, ts]

    async def load(self, bus: MessageBus) -> None:
        self.bus = bus
        try:
            grown = json.loads(await bus.position(GROWN) or "{}")
        except ValueError:
            grown = {}
        if isinstance(grown, dict):
            self._grown = {
                str(k): v for k, v in grown.items() if isinstance(v, list) and len(v) == 2
            }

    async def _keep_grown(self, reply_to: str, chat: str, ts: str | None) -> None:
        """Record (or, with None, forget) where a stored message's reply grows."""
        if ts is None:
            if self._grown.pop(reply_to, None) is None:
                return
        else:
            self._grown[reply_to] = [chat, ts]
            while len(self._grown) > GROWN_KEPT:
                self._grown.pop(next(iter(self._grown)))
        if self.bus is not None:
            await self.bus.receive("slack", [], (GROWN, json.dumps(self._grown)))

    def _stream_of(self, msg: OutboundMessage) -> _Stream | None:
        """The message this reply grows in: this run's, or one a run before began."""
        key = (msg.chat_id, msg.reply_to)
        if key not in self._streams and msg.seq is not None and msg.reply_to in self._grown:
            chat, ts = self._grown[msg.reply_to]
            if chat == msg.chat_id:
                self._streams[key] = _Stream(ts, "", 0.0)
        return self._streams.get(key)

    async def send(self, msg: OutboundMessage) -> None:
        part = msg.part
        try:
            if isinstance(part, Text):
                await self._text(msg, part)
            elif isinstance(part, Question):
                await self._post(msg.chat_id, mrkdwn.escape(part.text), part.choices)
            elif isinstance(part, Delta):
                await self._grow(msg, part.so_far)
            elif isinstance(part, DeltaEnd):
                await self._settle(msg)
            elif isinstance(part, File):
                await self._file(msg, part)
        except SendError as exc:
            if isinstance(part, Delta | DeltaEnd):  # the whole reply follows: a piece is no loss
                logger.debug("slack: a piece of a reply to {} was not shown: {}", msg.chat_id, exc)
                return
            if exc.transient:
                raise DeliveryLater(str(exc), retry_in_s=exc.retry_in_s) from None
            logger.warning("slack: a message to {} was refused for good: {}", msg.chat_id, exc)

    async def _text(self, msg: OutboundMessage, part: Text) -> None:
        shown = mrkdwn.escape(part.text) if part.style == "error" else mrkdwn.render(part.text)
        stream = self._stream_of(msg)
        self._streams.pop((msg.chat_id, msg.reply_to), None)
        if stream is not None and not part.buttons:  # the grown message becomes the reply
            if stream.shown != shown:
                await self._update(msg.chat_id, stream.ts, shown)
        else:
            await self._post(msg.chat_id, shown, part.buttons)
        if msg.reply_to is not None and msg.seq is not None:
            await self._keep_grown(msg.reply_to, msg.chat_id, None)

    async def _post(self, chat: str, text: str, buttons: tuple[Button, ...] = ()) -> str:
        channel, thread = target(chat)
        params: dict[str, Any] = {"channel": channel, "text": text or "…", "mrkdwn": True}
        params |= {"unfurl_links": False, "unfurl_media": False}
        if thread is not None:
            params["thread_ts"] = thread
        if buttons:
            params["blocks"] = blocks_for(text, buttons)
            if len(text) > SECTION_LIMIT:  # the words whole, then the choices under them
                await self._post(chat, text)
        answer = await call(self.client, "chat.postMessage", **params)
        return str(answer.get("ts", ""))

    async def _update(self, chat: str, ts: str, text: str, blocks: Any = None) -> None:
        params: dict[str, Any] = {"channel": target(chat)[0], "ts": ts, "text": text or "…"}
        if blocks is not None:
            params["blocks"] = blocks
        await call(self.client, "chat.update", **params)

    async def _grow(self, msg: OutboundMessage, so_far: str) -> None:
        """A piece of the reply: shown by editing one message, at most once per interval (the
        whole text so far goes each time, so a piece skipped is shown by the next one)."""
        if not self._streams_in(msg.chat_id) or not so_far.strip():
            return
        key, now = (msg.chat_id, msg.reply_to), time.monotonic()
        shown = mrkdwn.render(so_far)
        stream = self._stream_of(msg)
        if stream is None:
            ts = await self._post(msg.chat_id, shown)
            self._streams[key] = _Stream(ts, shown, now)
            if msg.reply_to is not None and msg.seq is not None:
                await self._keep_grown(msg.reply_to, msg.chat_id, ts)
        elif now - stream.at >= self.stream_every_s and shown != stream.shown:
            await self._update(msg.chat_id, stream.ts, shown)
            stream.shown, stream.at = shown, now

    async def _settle(self, msg: OutboundMessage) -> None:
        """A step's words are complete (a tool runs next): the next step grows a new message."""
        self._streams.pop((msg.chat_id, msg.reply_to), None)

    async def _file(self, msg: OutboundMessage, part: File) -> None:
        channel, thread = target(msg.chat_id)
        name = Path(part.path).name
        try:
            data = await asyncio.to_thread(file_bytes, self.workspace, part.path)
        except FileGone as exc:
            await self._post(
                msg.chat_id, mrkdwn.escape(f"The file {name} could not be sent: {exc}")
            )
            return
        try:
            await upload(self.client, channel, thread, name, data, part.caption)
        except SendError as exc:
            # A file is in no inbox: said in one line rather than dropped unseen.
            note = f"The file {name} could not be sent now: {exc}"
            await self._post(msg.chat_id, mrkdwn.escape(note))

    async def clear_buttons(self, chat: str, ts: str, text: str) -> None:
        """A choice was made: the buttons go, so nobody presses them twice."""
        section = [{"type": "section", "text": {"type": "mrkdwn", "text": text or "…"}}]
        try:
            await self._update(chat, ts, text, section)
        except SendError as exc:
            logger.debug("slack: could not remove the buttons in {}: {}", chat, exc)
