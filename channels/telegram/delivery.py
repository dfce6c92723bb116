"""Per-chat state and delivery of the Telegram channel, free of python-telegram-bot.

The core's per-chat outbound worker hands each message here, one chat at a time, in order, and
chats concurrently (one chat waiting out a flood limit never delays another); nothing here
queues or re-orders. A turn's life comes from the core (TurnStarted, TurnEnded: the shared
agent/chat_turns.py keeps it), the flood waits from the shared rate gate (agent/rate_gate.py).
The Bot API itself is reached through a small port.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from loguru import logger

from channels.telegram.bot_api import BotPort, SendError
from channels.telegram.drafts import Grown, Stream, Streamer
from channels.telegram.files import send_file
from channels.telegram.format import (
    halves,
    html_to_plain,
    message_chunks,
    too_long,
)
from nanomem.agent import (
    Button,
    ChannelDown,
    Command,
    DeliveryLater,
    Delta,
    DeltaEnd,
    File,
    MessageBus,
    OutboundMessage,
    Progress,
    RateGate,
    Text,
    TurnEnded,
    Turns,
    TurnStarted,
    TypingPace,
)

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
Buttons = tuple[Button, ...]
_COMMAND_NAME = re.compile(r"[a-z0-9_]{1,32}")
TOKEN_REJECTED = "telegram: the bot token was rejected (check telegram.token)"
EMPTY = "(the model sent an empty reply)"
SEND_ATTEMPTS = 6
TYPING_MAX_S = 600.0  # a turn silent this long gets no more typing actions


def target(key: str) -> tuple[int, int | None]:
    """A session chat id (`<chat>` or `<chat>:<topic>`) → (Telegram chat id, thread id)."""
    chat, _, thread = key.partition(":")
    return int(chat), int(thread) if thread else None


def is_allowed(
    allow_from: list[int | str], user_id: int, chat_id: int, owner: int | None = None
) -> bool:
    """The owner (telegram.owner) is always let in; numeric user ids (or a group's own id)
    grant access; "*" lets anyone in. Only a group's (negative) id admits by the chat: a
    private chat's id is its person's, and a press that claims one must not borrow that
    person's admission."""
    by_chat = chat_id < 0 and chat_id in allow_from
    return user_id == owner or "*" in allow_from or user_id in allow_from or by_chat


def _mention(username: str) -> str:
    return rf"(?<![\w@/])@{re.escape(username)}\b"


def mentions(text: str, username: str) -> bool:
    return bool(username) and re.search(_mention(username), text, re.IGNORECASE) is not None


def strip_mention(text: str, username: str) -> str:
    """Drop "@bot" from a group message; a message that is only the mention stays as is."""
    if not username:
        return text
    stripped = re.sub(_mention(username) + r"[ \t]*", "", text, flags=re.IGNORECASE)
    return stripped.strip() or text


def telegram_name(command: str) -> str:
    """Telegram's spelling of a command (no hyphens there): `dream-log` becomes `dream_log`."""
    return command.replace("-", "_")


def command_menu(commands: list[Command]) -> list[tuple[str, str]]:
    """(name, description) for Telegram's command menu, in Telegram's spelling."""
    menu = [("start", "say hello")]
    for command in filter(lambda c: c.listed, commands):
        name = telegram_name(command.name)
        if _COMMAND_NAME.fullmatch(name):  # Telegram allows [a-z0-9_]{1,32} only
            menu.append((name, command.summary[:256] or name))
    return menu


def in_telegram_spelling(text: str, commands: list[Command]) -> str:
    """Our own text (a command's reply) naming commands as the menu does: `/dream_restore`,
    which a person can tap, not `/dream-restore`."""
    for name in sorted((c.name for c in commands if "-" in c.name), key=len, reverse=True):
        text = re.sub(rf"(?<![\w/])/{re.escape(name)}\b", f"/{telegram_name(name)}", text)
    return text


def chunks_of(msg: OutboundMessage) -> list[tuple[str, bool]]:
    """(text, is_html) messages for one reply: rendered Markdown, or plain text for errors."""
    plain = isinstance(msg.part, Text) and msg.part.style == "error"
    return message_chunks(msg.content, plain=plain) or [(EMPTY, False)]


@dataclass
class ChatState:
    """A chat's tool-progress message (its turns are in `Delivery.turns`)."""

    status_id: int | None = None  # the tool-progress message being edited
    status_line: str = ""
    status_steps: int = 0
    status_at: float = 0.0
    status_queued: bool = False
    status_task: asyncio.Task[None] | None = None  # the progress refresh on its way, if any

    def progress(self, line: str, waiting: bool) -> bool:
        """Record a tool-progress line; True when a refresh of the status message should queue."""
        if not waiting:
            return False  # the turn already ended
        self.status_line, self.status_steps = line, self.status_steps + 1
        if self.status_queued:
            return False
        self.status_queued = True
        return True

    def status_due(self, every_s: float, waiting: bool, held: bool) -> str | None:
        """The status text to show now, or None (throttled, held back by a flood wait or a
        reply, or the turn is over)."""
        self.status_queued = False
        now = time.monotonic()
        if not waiting or held or now - self.status_at < every_s:
            return None
        self.status_at = now
        steps = f" · {self.status_steps} steps" if self.status_steps > 1 else ""
        return f"⚙️ {self.status_line}{steps}"

    def new_status(self) -> None:
        """A turn ended: the next one's progress gets a message of its own."""
        self.status_id, self.status_steps, self.status_at = None, 0, 0.0


class Delivery:
    """Replies, errors, notices, typing and progress for every chat, through a BotPort."""

    def __init__(
        self,
        port: BotPort,
        *,
        typing_every_s: float,
        status_every_s: float,
        backoff_s: float = 1.0,
        stream: bool = False,
        stream_groups: bool = False,
        stream_every_s: float = 1.0,
        typing_delay_s: float = 1.0,
        workspace: Path = Path(),
    ) -> None:
        self.port, self.workspace = port, workspace
        self.status_every_s = status_every_s
        self.backoff_s = backoff_s  # the first wait after a network error; doubles up to 30 s
        self.stream, self.stream_groups = stream, stream_groups
        self.gate = RateGate()  # Telegram's flood waits, per chat
        pace = TypingPace(typing_delay_s, typing_every_s, TYPING_MAX_S)
        self.turns: Turns[Stream] = Turns(self._typing, pace, self.gate.wait_s)
        self.grown = Grown()  # the messages stored messages' replies grow in, kept
        self.streamer = Streamer(port, self.gate, stream_every_s, posted=self._posted)
        self.chats: dict[str, ChatState] = {}
        # inbound id → (its Telegram message id, whether it came in a group)
        self._asked: OrderedDict[str, tuple[int, bool]] = OrderedDict()
        self._late: OrderedDict[str, None] = OrderedDict()  # answered out of order: quoted
        # A reply a flood wait cut mid-way → the parts delivered, so its retry goes on after them.
        self._parts_sent: OrderedDict[tuple[str, str | None, int | None, str], int] = OrderedDict()

    async def load(self, bus: MessageBus) -> None:
        await self.grown.load(bus)

    def chat(self, key: str) -> ChatState:
        return self.chats.setdefault(key, ChatState())

    def accepted(
        self, key: str, inbound_id: str, message_id: int, *, group: bool, late: bool = False
    ) -> None:
        """A message goes to the core: remember its Telegram id (a group's answer quotes it)
        and whether it came in a group (the channel's word). A `late` one (tried again after
        a failure) keeps nobody waiting; its answer quotes it, since the chat has moved on."""
        _remember(self._asked, inbound_id, (message_id, group))
        if late:
            _remember(self._late, inbound_id, None)

    async def send(self, msg: OutboundMessage) -> None:
        """Deliver one message; the core calls this for one chat at a time, in order (its
        per-chat outbound worker), so nothing here queues or re-orders. Raises DeliveryLater
        when a reply cannot be delivered now (with `retry_in_s` for a flood wait)."""
        part = msg.part
        if isinstance(part, Delta | DeltaEnd):  # best effort: never waited for, never raises
            return self._grow(msg)
        if isinstance(part, TurnStarted):
            if (msg.reply_to or "") not in self._late:  # a retry keeps nobody waiting
                self.turns.started(msg)
            return None
        if isinstance(part, File):  # mid-turn: the turn, its typing and progress go on
            try:
                await send_file(self, msg.chat_id, part, kept=msg.seq is not None)
            finally:
                self._forget_if_idle(msg.chat_id)
            return None
        chat = self.chat(msg.chat_id)
        if isinstance(part, Progress):
            self.turns.touch(msg.chat_id)
            if chat.progress(msg.content, self.turns.waiting(msg.chat_id)):  # the latest line
                chat.status_task = asyncio.create_task(self._show_status(msg.chat_id, chat))
            return None
        if (refresh := chat.status_task) is not None:  # the progress line goes out first
            chat.status_task = None
            await asyncio.gather(refresh, return_exceptions=True)
        if self.turns.is_turn(msg.chat_id, msg.reply_to):
            chat.new_status()
        if isinstance(part, TurnEnded):  # after its answer, if any
            if (cut := self.turns.ended(msg)) is not None:
                await self._keep_shown(cut)
            return self._forget_if_idle(msg.chat_id)
        stream = self.turns.answering(msg)
        if stream is not None:
            self.streamer.stop(stream)  # nothing more is shown before the reply replaces it
        await self._deliver(msg, stream)
        return None

    async def tell(self, key: str, text: str) -> None:
        """A short plain note outside any reply (a file that could not go); best effort."""
        try:
            await self.retrying(key, lambda: self.port.send_text(key, text, html=False))
        except SendError as exc:
            logger.warning("telegram: a note to chat {} was not sent: {}", key, exc)

    def _grow(self, msg: OutboundMessage) -> None:
        """A piece of a reply being written, shown (throttled) if this chat streams."""
        asked = self._asked.get(msg.reply_to or "")
        if not self.stream or asked is None or not isinstance(piece := msg.part, Delta):
            return  # a step's end: the next step's first piece shows it
        message_id, group = asked
        if group and not self.stream_groups:
            return
        quote = message_id if group else None
        stream = self.turns.growing(msg, lambda: self._stream(msg, not group, quote))
        if stream is not None:  # None: answered already (a piece never outruns its reply)
            self.streamer.piece(stream, piece.step, piece.so_far or stream.text + piece.piece)

    def _stream(self, msg: OutboundMessage, private: bool, quote: int | None) -> Stream:
        """A reply starting to grow: in the message a run before began it in, if any."""
        stream = Stream(msg.chat_id, private, quote, reply_to=msg.reply_to or "")
        stream.message_id = self.grown.get(msg.reply_to, msg.chat_id)
        return stream

    async def _posted(self, stream: Stream) -> None:
        if stream.message_id is not None:
            await self.grown.keep(stream.reply_to, stream.key, stream.message_id)

    async def _keep_shown(self, stream: Stream) -> None:
        """A turn /stop cut short: what the person saw of it stays in the chat (the session
        keeps it as the assistant's words too); a draft would vanish."""
        self.streamer.stop(stream)
        if not stream.text.strip():
            return
        kept = OutboundMessage("telegram", stream.key, Text(stream.text))
        with contextlib.suppress(DeliveryLater):  # logged; not in the inbox to send later
            await self._deliver(kept, stream)
        await self.grown.forget(stream.reply_to)

    async def close(self) -> None:
        """Stop typing and growing replies; what was not delivered stays in the inbox for the
        next start (the core's outbound worker delivers, and drains on a graceful stop)."""
        for stream in self.turns.close():
            self.streamer.cancel(stream)
        for chat in self.chats.values():
            if chat.status_task is not None:
                chat.status_task.cancel()

    async def _deliver(self, msg: OutboundMessage, stream: Stream | None = None) -> None:
        chunks = chunks_of(msg)
        asked = self._asked.get(msg.reply_to or "")
        late = (msg.reply_to or "") in self._late  # quoted: the chat has moved on meanwhile
        if late:
            del self._late[msg.reply_to or ""]
        reply_to = asked[0] if asked is not None and (asked[1] or late) else None
        cut = (msg.chat_id, msg.reply_to, msg.seq, msg.content)
        first = self._parts_sent.pop(cut, 0) + 1  # after a flood wait: the parts not yet sent
        if first > 1:
            reply_to = None
        try:
            if stream is not None:  # a draft is simply replaced by the reply; a message is not
                await self.streamer.finished(stream)
            # A stored reply whose run died while it grew: it finishes the message begun then.
            grown = self.grown.get(msg.reply_to, msg.chat_id) if msg.seq is not None else None
            grown = stream.message_id if stream is not None else grown
            if (
                first == 1
                and grown is not None
                and await self._replace(msg.chat_id, grown, *chunks[0])
            ):
                first, reply_to = 2, None
            for number, (text, html) in enumerate(chunks[first - 1 :], start=first):
                buttons = msg.buttons if number == len(chunks) else ()  # under the last part
                try:
                    await self._send_fitting(
                        msg.chat_id, text, html=html, reply_to=reply_to, buttons=buttons
                    )
                except SendError as exc:
                    if exc.retry_after is not None:  # the core sends it again after the wait
                        _remember(self._parts_sent, cut, number - 1)
                        raise DeliveryLater(str(exc), exc.retry_after + 0.5) from exc
                    part = msg.part
                    kind = part.style if isinstance(part, Text) else type(part).__name__.lower()
                    where = f"{kind} part {number}/{len(chunks)} to chat {msg.chat_id}"
                    logger.error("telegram: gave up sending {}: {}", where, exc)
                    if exc.transient:
                        raise DeliveryLater(str(exc)) from exc
                    break  # refused for good (blocked by the person, say): nothing to keep
                reply_to = None
            await self.grown.forget(msg.reply_to)  # replaced, or not there to replace
        finally:
            self._forget_if_idle(msg.chat_id)

    async def _send_fitting(
        self, key: str, text: str, *, html: bool, reply_to: int | None, buttons: Buttons = ()
    ) -> None:
        """Send one part; a part Telegram still finds too long goes out in smaller pieces."""
        try:
            return await self._send(key, text, html=html, reply_to=reply_to, buttons=buttons)
        except SendError as exc:
            if not too_long(str(exc)) or (pieces := halves(text, html=html)) is None:
                raise
        logger.warning("telegram: a message too long for {} goes in {} pieces", key, len(pieces))
        for number, piece in enumerate(pieces, start=1):
            last = buttons if number == len(pieces) else ()
            await self._send_fitting(key, piece, html=html, reply_to=reply_to, buttons=last)
            reply_to = None

    async def _replace(self, key: str, message_id: int, text: str, html: bool) -> bool:
        """Edit the message a reply grew in into the reply's first part; when that cannot be
        done, delete it (False: the whole reply is sent anew)."""
        try:
            await self._edit(key, message_id, text, html)
            return True
        except SendError as exc:
            logger.warning(
                "telegram: the growing reply in {} could not become the reply ({}); sent anew",
                key,
                exc,
            )
        try:
            await self.retrying(key, lambda: self.port.delete(key, message_id))
        except SendError as exc:
            logger.warning("telegram: could not delete a growing reply in {}: {}", key, exc)
        return False

    async def _edit(self, key: str, message_id: int, text: str, html: bool) -> None:
        def attempt(body: str, as_html: bool) -> Callable[[], Awaitable[None]]:
            async def edit() -> None:
                try:
                    await self.port.edit_text(key, message_id, body, html=as_html)
                except SendError as exc:
                    if not exc.not_modified:  # it shows this text already
                        raise

            return edit

        await self.html_or_plain(key, attempt, text, html)

    def _forget_if_idle(self, key: str) -> None:
        """Drop an idle chat's state, so the maps do not grow with every chat ever seen."""
        self.gate.forget(key)  # kept while its flood wait binds the next send
        chat = self.chats.get(key)  # later jobs start from a fresh one: that is what idle means
        if not self.turns.idle(key) or (chat is not None and chat.status_queued):
            return
        self.turns.forget_if_idle(key)
        self.chats.pop(key, None)

    async def _send(
        self, key: str, text: str, *, html: bool, reply_to: int | None = None, buttons: Buttons = ()
    ) -> None:
        def attempt(body: str, as_html: bool) -> Callable[[], Awaitable[int]]:
            return lambda: self.port.send_text(
                key, body, html=as_html, reply_to=reply_to, buttons=buttons
            )

        said = "resent as plain text"
        await self.html_or_plain(key, attempt, text, html, said=said, flood_later=True)

    async def html_or_plain(
        self,
        key: str,
        attempt: Callable[[str, bool], Callable[[], Awaitable[T]]],
        text: str,
        html: bool,
        *,
        said: str = "",
        flood_later: bool = False,
    ) -> T:
        """`attempt(text, html)`, retried; when Telegram refuses its HTML, once more as the
        same words in plain text (logged when `said` names what happened)."""
        try:
            return await self.retrying(key, attempt(text, html), flood_later=flood_later)
        except SendError as exc:
            if not (html and exc.bad_html):
                raise
            if said:
                logger.warning(
                    "telegram: Telegram refused the HTML of a message to {} ({}); {}",
                    key,
                    exc,
                    said,
                )
            plain = attempt(html_to_plain(text), False)
            return await self.retrying(key, plain, flood_later=flood_later)

    async def retrying(
        self, key: str, call: Callable[[], Awaitable[T]], *, flood_later: bool = False
    ) -> T:
        """A whole message's call, ahead of any edit (the rate gate); flood limits bind this
        chat only, network errors and 5xx are retried with backoff. `flood_later`: a flood
        wait is raised at once, for the core to send the reply again after it."""
        delay, attempt = self.backoff_s, 0
        while True:
            attempt += 1
            try:
                async with self.gate.reply(key):
                    return await call()
            except SendError as exc:
                if exc.retry_after is not None:
                    self.gate.block(key, exc.retry_after + 0.5)
                    logger.warning(
                        "telegram: flood control for chat {}: waiting {:.0f} s",
                        key,
                        exc.retry_after,
                    )
                    if flood_later:
                        raise
                if attempt >= SEND_ATTEMPTS or not (exc.retry_after is not None or exc.transient):
                    raise
                if exc.retry_after is None:
                    logger.warning(
                        "telegram: sending to chat {} failed ({}); retrying in {:.0f} s",
                        key,
                        exc,
                        delay,
                    )
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 30.0)

    async def _typing(self, key: str) -> None:
        """One typing action (chat_turns repeats it while a turn waits); a failure ends it."""
        try:
            await self.port.typing(key)
        except SendError as exc:
            if exc.retry_after is not None:
                self.gate.block(key, exc.retry_after)
            raise

    async def _show_status(self, key: str, chat: ChatState) -> None:
        """Tool progress as one edited message; best effort: never waits, never retries, and
        gives way to a reply (the next line shows the newest)."""
        held = self.gate.edit_in_s(key) > 0
        if (text := chat.status_due(self.status_every_s, self.turns.waiting(key), held)) is None:
            return
        try:
            if chat.status_id is None:
                chat.status_id = await self.port.send_text(key, text, html=False, quiet=True)
            else:
                await self.port.edit_text(key, chat.status_id, text, html=False)
        except SendError as exc:
            if exc.retry_after is not None:
                self.gate.block(key, exc.retry_after)
            logger.debug("telegram: progress in {} not shown: {}", key, exc)


def _remember(memory: OrderedDict[K, V], key: K, value: V, most: int = 4096) -> None:
    """Keep `value` under `key`, forgetting the oldest past `most`."""
    memory[key] = value
    while len(memory) > most:
        memory.popitem(last=False)


class PollWatch:
    """Watches the getUpdates long poll and restarts it when it died or stalled.

    PTB's polling task ends silently on a 401 (a revoked token) while `updater.running` stays
    True, and a poll that never comes back would go unnoticed too.
    """

    def __init__(self, stall_after_s: float, backoff_s: float = 1.0) -> None:
        self.stall_after_s, self.backoff_s = stall_after_s, backoff_s
        self.error = ""  # the last polling error PTB reported, if any
        self.problem: str | None = None  # what /health shows
        self.reset()

    def reset(self) -> None:
        self.last_done = self.last_ok = time.monotonic()
        self.last_status = 0

    def finished(self, status: int | None) -> None:
        """Called as each poll ends (status None: no HTTP answer at all)."""
        self.last_done = time.monotonic()
        if status is not None:
            self.last_status = status
            if status == 200:
                self.last_ok, self.error = self.last_done, ""

    def dead(self) -> bool:
        unauthorized = self.last_status in (401, 404)
        return unauthorized or time.monotonic() - self.last_done > self.stall_after_s

    def diagnose(self) -> str | None:
        if self.last_status in (401, 404):
            return TOKEN_REJECTED
        if self.last_status not in (0, 200) and self.error:
            return f"telegram: polling fails: {self.error}"
        quiet = time.monotonic() - self.last_ok
        if quiet > self.stall_after_s:
            cause = f" (last error: {self.error})" if self.error else ""
            return f"telegram: no answer to polling for {quiet:.0f} s{cause}"
        return None

    def report(self, problem: str | None) -> None:
        if problem != self.problem:
            if problem:
                logger.error(problem)
            else:
                logger.info("telegram: polling works again")
        self.problem = problem

    async def run(self, restart: Callable[[], Awaitable[None]], every_s: float) -> None:
        """Check every `every_s`; restart a dead poll, backing off while restarts fail."""
        delay = every_s
        while True:
            await asyncio.sleep(delay)
            self.report(self.diagnose())
            if not self.dead():
                delay = every_s
                continue
            logger.warning("telegram: polling stopped; restarting it")
            try:
                await restart()
                delay = every_s
                continue
            except ChannelDown as exc:
                self.report(str(exc))
            except Exception as exc:
                logger.opt(exception=exc).debug("restarting Telegram polling failed")
                self.report(f"telegram: restarting polling failed: {type(exc).__name__}: {exc}")
            delay = min(max(delay * 2, self.backoff_s), 300.0)
