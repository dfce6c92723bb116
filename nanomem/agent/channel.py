"""The channel port: how a chat surface plugs into the core (docs/channels.md).

A channel says what it can do as data (`Capabilities`); the core picks the form of what it
sends from that, never from the channel's name or by probing it for methods."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from nanomem.agent.bus import MessageBus
from nanomem.agent.markup import plain_text, split_text
from nanomem.agent.outbound import (
    Button,
    Delta,
    DeltaEnd,
    File,
    OutboundMessage,
    Progress,
    Question,
    Text,
    TurnEnded,
    TurnStarted,
)
from nanomem.audience import media_folder
from nanomem.durable import write_below

if TYPE_CHECKING:
    from nanomem.agent.feature import TellOwner
    from nanomem.agent.inbox import Pending

Job = Callable[[], Awaitable[None]]
Markup = Literal["markdown", "html", "plain"]


@dataclass(frozen=True)
class Capabilities:
    """What a channel can do. The core reads these, and nothing else, to choose what to send
    and in which form."""

    streams: bool = False  # shows a reply while it is written: pieces of it are worth sending
    edits: bool = False  # changes a message it sent (a growing reply, a progress line)
    drafts: bool = False  # shows a reply growing as a draft before it is sent
    buttons: bool = False  # shows choices as buttons a person presses
    files: bool = False  # sends a file
    # The longest text it takes in one message (0: no limit), in `measure`'s units; the core
    # splits a longer one at paragraph, line or word boundaries, keeping code blocks whole.
    # An "html" channel that gives none renders and splits the whole reply itself.
    max_chars: int = 0
    # How a message's length is counted against max_chars, when not in characters: bytes of
    # the event a channel sends, UTF-16 units, the length of its rendering. Given a piece in
    # the channel's markup (the model's Markdown, or plain), as the core would send it; the
    # channel may render it first (nanomem/text has renderers and their measures).
    measure: Callable[[str], int] | None = None
    # How it shows the model's Markdown: "markdown" (as written, or rendered by the channel
    # from Markdown), "html" (rendered by the channel into its own HTML), "plain" (the core
    # sends readable plain text: no markers, links as `text (url)`).
    markup: Markup = "markdown"
    pushes: bool = False  # sends a message nobody asked for (a scheduled turn's reply)
    reaches_owner: bool = False  # reaches the owner privately (notices for the owner)
    same_connection: bool = False  # answers on the connection that asked (the agent API)
    turns: bool = False  # is told when a turn starts and ends (TurnStarted, TurnEnded)


def _logger() -> Any:
    # This module is on `nanomem chat`'s path to its prompt, and only failures log here:
    # loguru (~25 ms to import) loads behind the prompt instead.
    from loguru import logger

    return logger


def save_media(workspace: Path, session: str, name: str, data: bytes, room: bool) -> str:
    """Save a file a chat sent into its media folder; its path relative to the workspace, as
    the turn is given it. Blocking. No link below the workspace is followed (OSError when one
    is in the way): a sandboxed command may have made `media` a link, and a name planted under
    the final one (a hard link to USER.md) is replaced, never written through."""
    root = workspace.resolve()
    relative = media_folder(root, session, room).relative_to(root) / name
    write_below(root, relative, data)
    return str(relative)


def image_suffix(data: bytes) -> str | None:
    """The suffix of an image a model takes, told by its first bytes (what a client or a
    server claims may be wrong); None for anything else."""
    from nanomem.tools import image_suffix as told

    return told(data)


class FileGone(Exception):
    """A file handed to a channel cannot be read as `send_file` checked it (gone, replaced by
    a link, grown too big); the message is one line."""


def file_bytes(workspace: Path, path: str) -> bytes:
    """The bytes of a `File` part's file, read as the file tools read (no link followed on
    the way, no hard link): it may have changed since `send_file` checked it, and is held to
    the same limit. Blocking."""
    from nanomem.tools import MAX_SEND_BYTES as limit
    from nanomem.tools import ToolError, read_checked

    root = workspace.resolve()
    try:
        data = read_checked(root, root / path, path, limit + 1)
    except (ToolError, OSError) as exc:
        raise FileGone(str(exc)) from None
    if len(data) > limit:
        raise FileGone(f"{path!r} is larger than {limit} bytes now")
    return data


class Channel(Protocol):
    """The contract every channel keeps (docs/channels.md); `BaseChannel` gives the defaults
    of what most channels do not need."""

    name: str
    capabilities: Capabilities

    async def start(self, bus: MessageBus) -> None:
        """Begin receiving messages and handing them to the core."""

    async def stop_receiving(self) -> None:
        """Take no new messages; sending keeps working for the replies still on their way."""

    async def stop(self) -> None: ...

    async def send(self, msg: OutboundMessage) -> None:
        """Return once the message is delivered (or refused for good); raise DeliveryLater when
        it cannot be delivered now. The core calls it for one chat at a time, in order, and
        for different chats concurrently; what it gets is already in a form the capabilities
        allow (no pieces for a channel that does not stream, no buttons where there are none)."""

    def problem(self) -> str | None:
        """None while the channel works; otherwise one line saying what is wrong."""

    def routes(self, web_app: Any) -> None:
        """Add its HTTP routes to the gateway's server (an aiohttp Application)."""

    def listens(self, server: str) -> str:
        """Where it takes messages, for the gateway's start ("" for nothing to say); `server`:
        the gateway's own HTTP server, `http://host:port`."""

    async def readmit(self, pending: Pending) -> bool:
        """Take a stored message whose handling failed once more; False when it cannot now."""

    def admits(self, chat: str, sender: str) -> bool:
        """Would this sender's message in this chat be answered now (before a scheduled turn
        made by someone since refused)?"""

    def owner_chat(self) -> str | None:
        """The owner's private chat here, when `capabilities.reaches_owner`."""

    def reach_owner(self, owner: TellOwner | None) -> None:
        """Given the gateway's outlet to the owner (None: no channel reaches them), for a
        channel that passes on to the owner what it cannot show itself."""


class BaseChannel:
    """The defaults: no HTTP routes, nothing stored to take back, everyone admitted, no owner
    chat, never a problem. A channel overrides what it does."""

    name = ""
    capabilities = Capabilities()

    async def stop_receiving(self) -> None:
        return None

    def problem(self) -> str | None:
        return None

    def routes(self, web_app: Any) -> None:
        return None

    def listens(self, server: str) -> str:
        return ""

    async def readmit(self, pending: Pending) -> bool:
        return False

    def admits(self, chat: str, sender: str) -> bool:
        return True

    def owner_chat(self) -> str | None:
        return None

    def reach_owner(self, owner: TellOwner | None) -> None:
        return None


class ChannelDown(Exception):
    """A channel cannot run right now (bad token, network down); the message is one line."""


class DeliveryLater(Exception):
    """A reply could not be delivered now (network down); it stays in the inbox and is sent
    again at the next start, or, with `retry_in_s` (a rate limit's wait), again within the
    run after that many seconds, the chat's later messages waiting behind it."""

    def __init__(self, message: str = "", retry_in_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_in_s = retry_in_s


class ChatQueues:
    """Jobs run one at a time per chat and concurrently across chats; idle chats cost nothing."""

    def __init__(self, label: str) -> None:
        self.label = label
        self._jobs: dict[str, deque[Job]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}

    def submit(self, chat: str, job: Job) -> None:
        jobs = self._jobs.setdefault(chat, deque())
        jobs.append(job)
        if chat not in self._workers:
            self._workers[chat] = asyncio.create_task(self._work(chat), name=f"{self.label}:{chat}")

    async def _work(self, chat: str) -> None:
        jobs = self._jobs[chat]
        try:
            while jobs:
                try:
                    await jobs.popleft()()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    _logger().exception("{}: a job for chat {} failed", self.label, chat)
        finally:
            del self._jobs[chat], self._workers[chat]

    async def drain(self, within_s: float) -> bool:
        """Wait up to `within_s` seconds for every queued job; True when all of them ran."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while self._workers and (left := deadline - loop.time()) > 0:
            await asyncio.wait(set(self._workers.values()), timeout=left)
        return not self._workers

    async def cancel(self) -> None:
        workers = list(self._workers.values())
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)


def shaped(msg: OutboundMessage, can: Capabilities) -> OutboundMessage | None:
    """The form of a message this channel can show; None when it shows nothing of it (the whole
    reply always follows a piece, so a channel that does not stream loses nothing)."""
    part = msg.part
    if isinstance(part, TurnStarted | TurnEnded):
        return msg if can.turns else None
    if isinstance(part, Delta | DeltaEnd):
        return msg if can.streams else None
    if isinstance(part, Progress):
        return msg if can.streams or can.edits else None
    if isinstance(part, Question) and not can.buttons:
        return replace(msg, part=Text(_with_choices(part.text, part.choices), "command"))
    if isinstance(part, Text) and part.buttons and not can.buttons:
        text = _with_choices(part.text, part.buttons)
        return replace(msg, part=replace(part, text=text, buttons=()))
    if isinstance(part, File) and not can.files:
        # Where it lies, for a person who can reach the workspace (this chat cannot carry it).
        line = f"📎 {part.path} (a file in nanomem's workspace; this chat cannot carry files)"
        return replace(msg, part=Text("\n\n".join(filter(None, [part.caption, line])), "command"))
    return msg


def forms(msg: OutboundMessage, can: Capabilities) -> list[OutboundMessage]:
    """What the channel is sent for one message, in order: its `shaped` form, the model's
    words in the channel's markup, split within its longest message by its measure, code
    blocks kept whole (buttons under the last part). Empty when it shows nothing of it."""
    form = shaped(msg, can)
    if form is None:
        return []
    part = form.part
    if not isinstance(part, Text) or (can.markup == "html" and not can.max_chars):
        return [form]  # an "html" channel without a limit renders and splits itself
    text = part.text
    if can.markup == "plain" and part.style == "reply":  # commands and errors are plain already
        text = plain_text(text)
    if not can.max_chars or (can.measure is None and len(text) <= can.max_chars):
        return [form if text == part.text else replace(form, part=replace(part, text=text))]
    pieces = split_text(text, can.max_chars, can.measure, fences=can.markup != "plain")
    last = len(pieces) - 1
    return [
        replace(form, part=replace(part, text=piece, buttons=part.buttons if n == last else ()))
        for n, piece in enumerate(pieces)
    ]


async def forms_off_the_loop(msg: OutboundMessage, can: Capabilities) -> list[OutboundMessage]:
    """`forms`, in a worker thread for a long text: rendering and measuring it piece by piece
    takes seconds, while other chats' acknowledgements are due within three."""
    if isinstance(msg.part, Text) and len(msg.part.text) > FORMS_ON_THE_LOOP_CHARS:
        return await asyncio.to_thread(forms, msg, can)
    return forms(msg, can)


def _with_choices(text: str, choices: tuple[Button, ...]) -> str:
    """Choices as lines to type, for a channel without buttons."""
    return "\n".join([text, "", *(f"{b.label}: {b.command}" for b in choices)])


# A reply refused with DeliveryLater(retry_in_s) is sent again within the run at most this many
# times, each wait at most this long; past either it is kept for the next start, as is one
# still waiting when the gateway stops, unless it is due within LATER_AT_STOP_S.
LATER_ATTEMPTS = 8
FORMS_ON_THE_LOOP_CHARS = 20_000  # a text split on the event loop takes milliseconds up to this
LATER_LONGEST_S = 900.0
LATER_AT_STOP_S = 2.0


async def pump_outbound(channel: Channel, bus: MessageBus) -> None:
    """Deliver one channel's outbox forever, in the form its capabilities allow. Per-chat order
    is kept here, once: a chat's messages are sent one after another, in the order they were
    made, while chats go concurrently (one waiting out a flood limit never holds up another).
    A delivered reply leaves the inbox."""
    if channel.capabilities.turns:
        bus.turns.add(channel.name)  # the core tells it of each turn's start and end
    outgoing = Outgoing(channel, bus)
    box = bus.outbox(channel.name)
    try:
        while True:
            outgoing.put(await box.get())
    finally:
        await outgoing.chats.cancel()


class Outgoing:
    """One channel's messages on their way, each chat's in order. A piece of a reply still
    waiting behind a slow send is replaced by a newer piece of the same step: only the newest
    text so far needs showing (never merged across a step's end, a whole message or another
    reply, which wait between them)."""

    def __init__(self, channel: Channel, bus: MessageBus) -> None:
        self.channel, self.bus = channel, bus
        self.chats = ChatQueues(f"{channel.name}-out")
        self._waiting: dict[str, deque[OutboundMessage]] = {}
        self._held: set[str] = set()  # chats whose delivery the stop cut: nothing more goes

    def put(self, msg: OutboundMessage) -> None:
        if shaped(msg, self.channel.capabilities) is None:
            return  # nothing of it is shown here (never an answer: nothing to mark delivered)
        waiting = self._waiting.get(msg.chat_id)
        if waiting is None:
            waiting = self._waiting[msg.chat_id] = deque()
        elif (merged := _merged(waiting[-1], msg)) is not None:
            waiting[-1] = merged
            return
        waiting.append(msg)
        self.bus.sending(self.channel.name, +1)
        self.chats.submit(msg.chat_id, functools.partial(self._next, msg.chat_id))

    async def _next(self, chat: str) -> None:
        waiting = self._waiting[chat]
        msg = waiting.popleft()
        if not waiting:
            del self._waiting[chat]
        try:
            if chat in self._held:  # an earlier one waits for the next start: this one too
                _kept(self.channel, msg, "an earlier message to this chat waits for the next start")
                return
            parts = await forms_off_the_loop(msg, self.channel.capabilities)
            if not await send_in_turn(self.channel.send, parts, self.bus.closing):
                self._held.add(chat)
                _kept(self.channel, msg, "the gateway stopped while it waited out a rate limit")
                return
            await self.bus.delivered(msg)
        except asyncio.CancelledError:
            raise
        except DeliveryLater as exc:
            _kept(self.channel, msg, str(exc))
        except Exception:
            name = self.channel.name
            _logger().exception("{}: could not deliver a message to chat {}", name, chat)
        finally:
            self.bus.sending(self.channel.name, -1)


async def send_in_turn(
    send: Callable[[OutboundMessage], Awaitable[None]],
    parts: list[OutboundMessage],
    closing: asyncio.Event | None = None,
) -> bool:
    """Send a message's parts in order. A part refused with DeliveryLater(retry_in_s) is sent
    again after that wait, from that part on (those delivered are never sent twice); the
    caller, one chat's worker, holds the chat's later messages behind it meanwhile. False when
    `closing` (a graceful stop) came during a long wait; DeliveryLater when given up."""
    done = attempts = 0
    loop = asyncio.get_running_loop()
    while True:
        try:
            for part in parts[done:]:
                await send(part)
                done += 1
            return True
        except DeliveryLater as exc:
            attempts += 1
            wait = exc.retry_in_s
            if wait is None or attempts >= LATER_ATTEMPTS or wait > LATER_LONGEST_S:
                raise
            due = loop.time() + max(0.0, wait)
            if closing is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(closing.wait(), max(0.0, wait))
                if closing.is_set() and due - loop.time() > LATER_AT_STOP_S:
                    return False
            await asyncio.sleep(max(0.0, due - loop.time()))


def _merged(waiting: OutboundMessage, newer: OutboundMessage) -> OutboundMessage | None:
    """One piece for two of the same reply's step, the newer's text so far; None otherwise."""
    old, new = waiting.part, newer.part
    if not (isinstance(old, Delta) and isinstance(new, Delta)):
        return None
    if old.step != new.step or waiting.reply_to != newer.reply_to:
        return None
    return replace(newer, part=Delta(old.piece + new.piece, new.so_far, new.step))


def _kept(channel: Channel, msg: OutboundMessage, why: str) -> None:
    """Logged once: an answer in the inbox is sent again at the next start; anything else is
    dropped (it is in no inbox)."""
    kept = msg.seq is not None and msg.is_answer
    fate = "is kept for the next start" if kept else "is dropped (not in the inbox)"
    what = "a file" if isinstance(msg.part, File) else "a reply"
    _logger().warning("{}: {} to chat {} {}: {}", channel.name, what, msg.chat_id, fate, why)
