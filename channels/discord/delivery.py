"""Replies, typing and growing replies of the Discord channel, per chat.

The core's per-chat outbound worker hands each message here one at a time, in order; chats go
concurrently. A slash command's answer goes through its interaction (the deferred response,
then follow-ups) while its token lives; everything else is a channel message. Nothing the
model writes may ping: every message says `allowed_mentions` nobody."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loguru import logger

from channels.discord.client import Gateway, SendError, components
from nanomem.agent import (
    DeliveryLater,
    Delta,
    File,
    FileGone,
    MessageBus,
    OutboundMessage,
    Question,
    Text,
    TurnEnded,
    Turns,
    TurnStarted,
    TypingPace,
    file_bytes,
)
from nanomem.text.discord_markdown import neutralise_mentions, render_discord

NOBODY = {"parse": [], "replied_user": False}  # allowed_mentions: no ping, whatever the text
LIMIT = 2000  # Discord's longest message, in characters
# Of a growing reply, what is rendered for its preview (which shows LIMIT at most): rendering
# all of a long one, with every piece, would hold the event loop for seconds.
PREVIEWED = 4 * LIMIT
TOKEN_LIVES_S = 14 * 60.0  # an interaction's token answers for 15 minutes
TYPING_EVERY_S = 8.0  # Discord shows "typing" for 10 s
TYPING_MAX_S = 600.0  # a turn silent this long gets no more typing
ATTEMPTS = 4  # of a send that failed on the network or a 5xx
LATER_S = 30.0  # when a send that keeps failing is tried again within the run
EMPTY = "(the model sent an empty reply)"
KEPT = 4096  # inbound ids, message ids and interactions remembered, newest kept
# The inbox's record of slash commands answered "thinking…" and not yet through their
# interaction ({inbound id: [token, unix time]}): after a crash the answer still finishes it.
THINKING = "discord.thinking"
THINKING_KEPT = 200


@dataclass
class Stream:
    """A reply growing in one message while the model writes it."""

    text: str = ""
    message_id: str | None = None
    shown_at: float = 0.0
    nonce: str = ""  # the reply's first part's: a run after a crash finds this message by it
    task: asyncio.Task[None] | None = None  # the post or edit on its way (one at a time)


@dataclass(frozen=True)
class Asked:
    """An accepted message: where it is in Discord, who wrote it, its interaction's token."""

    message_id: str
    user: str
    guild: bool
    token: str = ""
    at: float = 0.0


class Delivery:
    def __init__(
        self,
        client: Gateway,
        *,
        workspace: Path,
        owner: str | None,
        stream_dms: bool,
        stream_guilds: bool,
        stream_every_s: float,
        max_file_mb: int,
        typing_delay_s: float = 1.0,
    ) -> None:
        self.client, self.workspace, self.owner = client, workspace, owner
        self.stream_dms, self.stream_guilds = stream_dms, stream_guilds
        self.stream_every_s, self.typing_delay_s = stream_every_s, typing_delay_s
        self.max_bytes = max_file_mb * 2**20
        pace = TypingPace(delay_s=typing_delay_s, every_s=TYPING_EVERY_S, silent_max_s=TYPING_MAX_S)
        self.turns: Turns[Stream] = Turns(self._typing, pace)
        self._asked: OrderedDict[str, Asked] = OrderedDict()  # inbound id → its message
        self._pressers: OrderedDict[str, str] = OrderedDict()  # buttons' message → who may press
        self._parts: OrderedDict[str, int] = OrderedDict()  # reply_to → parts sent so far
        self._deferred: dict[str, tuple[str, float]] = {}  # THINKING
        self._bus: MessageBus | None = None

    async def load(self, bus: MessageBus) -> None:
        """The "thinking…" answers a run before left, whose tokens still live."""
        self._bus = bus
        try:
            kept = json.loads(await bus.position(THINKING) or "{}")
        except ValueError:
            kept = {}
        if isinstance(kept, dict):
            self._deferred = {
                str(k): (v[0], float(v[1]))
                for k, v in kept.items()
                if isinstance(v, list) and len(v) == 2 and isinstance(v[0], str)
                and isinstance(v[1], int | float) and time.time() - v[1] < TOKEN_LIVES_S
            }  # fmt: skip

    async def deferring(self, inbound_id: str, token: str) -> None:
        """A slash command is about to be answered "thinking…": kept before it is."""
        self._deferred[inbound_id] = (token, time.time())
        while len(self._deferred) > THINKING_KEPT:
            self._deferred.pop(next(iter(self._deferred)))
        await self._keep_deferred()

    async def _keep_deferred(self) -> None:
        if self._bus is None:
            return
        kept = json.dumps({k: list(v) for k, v in self._deferred.items()})
        try:
            await self._bus.receive("discord", [], (THINKING, kept))
        except Exception as exc:  # an aid after a crash: never worth the interaction's answer
            logger.warning('discord: could not record a "thinking…" answer: {}', exc)

    def accepted(self, inbound_id: str, asked: Asked) -> None:
        """A message went to the core: where its answer goes, and who may press its buttons."""
        _keep(self._asked, inbound_id, asked)

    def may_press(self, message_id: str, user: str) -> bool:
        """The owner, or the person whose message the buttons answer."""
        return user == self.owner or self._pressers.get(message_id) == user

    async def send(self, msg: OutboundMessage) -> None:
        part = msg.part
        if isinstance(part, TurnStarted):
            self.turns.started(msg)  # typing shows until the answer
        elif isinstance(part, TurnEnded):
            if (cut := self.turns.ended(msg)) is not None:
                await self._finish(cut)  # a turn /stop cut short: what was shown stays
            self.turns.forget_if_idle(msg.chat_id)
        elif isinstance(part, Delta):
            self._grow(msg, part.so_far)
        elif isinstance(part, File):
            await self._send_file(msg.chat_id, part)
        elif isinstance(part, Text | Question):
            stream = self.turns.answering(msg)
            try:
                await self._reply(msg, stream)
            except SendError as exc:  # refused for good (no access, the channel gone)
                logger.error("discord: gave up a reply to {}: {}", msg.chat_id, exc)
            finally:
                self.turns.forget_if_idle(msg.chat_id)
        # A step's end, a tool's progress: the growing reply says enough.

    async def _reply(self, msg: OutboundMessage, stream: Stream | None) -> None:
        part = msg.part
        text = msg.content or EMPTY
        if isinstance(part, Text) and part.style == "error":  # a short plain note of ours
            text = neutralise_mentions(text)
        else:  # the model's Markdown, or the runtime's own, as Discord shows it
            text = render_discord(text)
        payload: dict[str, Any] = {"content": text, "allowed_mentions": NOBODY}
        if msg.buttons:
            payload["components"] = components(msg.buttons)
        asked = self._asked.get(msg.reply_to or "")
        number = self._parts.get(msg.reply_to or "", 0)  # of this reply's parts, sent so far
        try:
            made = await self._deliver(msg, payload, stream, asked, number)
        except DeliveryLater:
            if stream is not None and msg.reply_to:  # the core's re-send edits it, not a second
                self.turns.chat(msg.chat_id).streams[msg.reply_to] = stream
            raise
        if msg.reply_to:
            _keep(self._parts, msg.reply_to, number + 1)
        if msg.buttons and made:
            _keep(self._pressers, made, asked.user if asked is not None else "")

    async def _deliver(
        self,
        msg: OutboundMessage,
        payload: dict[str, Any],
        stream: Stream | None,
        asked: Asked | None,
        number: int,
    ) -> str:
        """One part sent; the id of the message that shows it."""
        if stream is not None and (made := await self._finish(stream)) is not None:
            await self._edit(msg.chat_id, made, payload)  # the grown message becomes the reply
            return made
        if token := self._token(msg.reply_to, asked):
            made = await self._answer_interaction(token, payload, first=number == 0)
            if self._deferred.pop(msg.reply_to or "", None) is not None:
                await self._keep_deferred()
            return str(made.get("id", "")) if isinstance(made, dict) else ""
        if asked is not None and asked.guild and asked.message_id and number == 0:
            payload["message_reference"] = {
                "message_id": asked.message_id,
                "fail_if_not_exists": False,
            }
        if msg.seq is not None:  # a re-send after a crash is the same message, not a second
            payload |= {"nonce": _nonce(msg.seq, number), "enforce_nonce": True}
        made = await self._post(msg.chat_id, payload)
        if not isinstance(made, dict):
            return ""
        if made.get("content") != payload["content"]:  # half-grown by a run that was killed
            fields = ("content", "allowed_mentions", "components")
            await self._edit(
                msg.chat_id, str(made["id"]), {k: payload[k] for k in fields if k in payload}
            )
        return str(made.get("id", ""))

    def _token(self, reply_to: str | None, asked: Asked | None) -> str:
        """The interaction's token while it lives: this run's, or one a run before kept."""
        if asked is not None and asked.token and time.monotonic() - asked.at < TOKEN_LIVES_S:
            return asked.token
        kept = self._deferred.get(reply_to or "")
        return kept[0] if kept is not None and time.time() - kept[1] < TOKEN_LIVES_S else ""

    async def _answer_interaction(self, token: str, payload: dict[str, Any], *, first: bool) -> Any:
        """The deferred response ("thinking…") becomes the first part; later parts follow."""
        app = self.client.app_id
        if first:
            path = "/webhooks/{app}/{token}/messages/@original"
            return await self._retrying(
                lambda: self.client.call("PATCH", path, payload, app=app, token=token)
            )
        path = "/webhooks/{app}/{token}"
        return await self._retrying(
            lambda: self.client.call("POST", path, payload, app=app, token=token)
        )

    async def _post(self, chat: str, payload: dict[str, Any]) -> Any:
        return await self._retrying(lambda: self.client.send(chat, payload))

    async def _edit(self, chat: str, message_id: str, payload: dict[str, Any]) -> None:
        path = "/channels/{channel_id}/messages/{message_id}"
        await self._retrying(
            lambda: self.client.call("PATCH", path, payload, channel_id=chat, message_id=message_id)
        )

    async def _retrying(self, call: Any) -> Any:
        """A network error or 5xx is tried again a few times; a rate limit longer than the
        client waits out, and failures that persist, are the core's to retry later."""
        delay = 1.0
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return await call()
            except SendError as exc:
                if exc.retry_after is not None:
                    raise DeliveryLater(str(exc), retry_in_s=exc.retry_after) from None
                if not exc.transient:
                    raise
                if attempt == ATTEMPTS:
                    raise DeliveryLater(str(exc), retry_in_s=LATER_S) from None
                await asyncio.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    # Growing replies: best effort, never retried, never waited for by the chat.

    def _grow(self, msg: OutboundMessage, so_far: str) -> None:
        asked = self._asked.get(msg.reply_to or "")
        if asked is None or asked.token:  # a slash command answers through its interaction
            return
        if not (self.stream_guilds if asked.guild else self.stream_dms):
            return
        if (stream := self.turns.growing(msg, Stream)) is None:
            return  # answered already
        if msg.seq is not None and not self._parts.get(msg.reply_to or ""):
            stream.nonce = _nonce(msg.seq, 0)
        stream.text = render_discord(so_far[:PREVIEWED])
        busy = stream.task is not None and not stream.task.done()
        if busy or time.monotonic() - stream.shown_at < self.stream_every_s or not so_far.strip():
            return  # skipped: the next piece, or the reply itself, shows it
        stream.shown_at = time.monotonic()
        stream.task = asyncio.create_task(self._show(msg.chat_id, stream), name="discord-stream")

    async def _show(self, chat: str, stream: Stream) -> None:
        text = stream.text if len(stream.text) <= LIMIT else stream.text[: LIMIT - 1] + "…"
        payload: dict[str, Any] = {"content": text, "allowed_mentions": NOBODY}
        try:
            if stream.message_id is None:
                if stream.nonce:
                    payload |= {"nonce": stream.nonce, "enforce_nonce": True}
                stream.message_id = str((await self.client.send(chat, payload))["id"])
            else:
                path = "/channels/{channel_id}/messages/{message_id}"
                await self.client.call(
                    "PATCH", path, payload, channel_id=chat, message_id=stream.message_id
                )
        except SendError as exc:  # a rate limit included: this edit is skipped
            logger.debug("discord: a growing reply in {} was not shown: {}", chat, exc)

    async def _finish(self, stream: Stream) -> str | None:
        """The grown message's id once its last post or edit is done (None: never posted)."""
        if stream.task is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(stream.task), 5.0)
            stream.task.cancel()
        return stream.message_id

    # Files and typing.

    async def _send_file(self, chat: str, part: File) -> None:
        name = Path(part.path).name
        try:
            data = await asyncio.to_thread(file_bytes, self.workspace, part.path)
            if len(data) > self.max_bytes:
                raise FileGone(f"it is larger than discord.max_file_mb ({self.max_bytes >> 20} MB)")
            payload = {"content": part.caption[:LIMIT], "allowed_mentions": NOBODY}
            await self._retrying(lambda: self.client.send(chat, payload, (name, data)))
        except (FileGone, SendError, DeliveryLater) as exc:
            logger.warning("discord: the file {} was not sent to {}: {}", part.path, chat, exc)
            note = {
                "content": f"The file {name} could not be sent now: {exc}"[:LIMIT],
                "allowed_mentions": NOBODY,
            }
            with contextlib.suppress(SendError, DeliveryLater):
                await self._post(chat, note)

    async def _typing(self, chat: str) -> None:
        await self.client.call("POST", "/channels/{channel_id}/typing", channel_id=chat)

    async def close(self) -> None:
        for stream in self.turns.close():
            if stream.task is not None:
                stream.task.cancel()


def _nonce(seq: int, part: int) -> str:
    """A reply part's nonce: Discord answers a second post with it by the first message."""
    return f"nm{seq}p{part}"


def _keep(kept: OrderedDict[str, Any], key: str, value: Any) -> None:
    kept[key] = value
    kept.move_to_end(key)
    while len(kept) > KEPT:
        kept.popitem(last=False)
