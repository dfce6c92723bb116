"""The message bus: channels put inbound messages on it, the agent loop puts replies back
(a channel that answers on the connection that asked, the API, calls the loop directly).

With an inbox, the bus is also where durability is kept: a channel stores what it received
(`receive`) before acknowledging it to its source, the loop records each reply once its turn is
saved (`answered`), and the delivery of that reply removes the message (`delivered`). What is
left after a crash or a stop is handed back to the channel at its next start (`unfinished`).
A message whose handling failed stays too (`failed`): agent/retries.py tries it again.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from nanomem.agent.outbound import OutboundMessage
from nanomem.audience import Sender
from nanomem.thread_batch import ThreadBatch

if TYPE_CHECKING:  # sqlite and loguru stay off `nanomem chat`'s way to its prompt
    from nanomem.agent.client_turn import ClientTurn
    from nanomem.agent.inbox import Inbox, Pending

# Failed attempts so far → seconds until the next attempt, or None: park the message.
RetryPlan = Callable[[int], float | None]
# The core taking a message (AgentLoop.take): it returns once the message has a place.
Take = Callable[["InboundMessage"], Awaitable[None]]
# The channel's own work on a message before its turn (a download, say), run by the core in
# the chat's order: the message as the turn gets it, or None when the channel answered it.
Prepare = Callable[["InboundMessage"], Awaitable["InboundMessage | None"]]


def _now() -> datetime:
    return datetime.now(UTC)


def _new_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class InboundMessage:
    """A message for the core, as its channel vouches for it: who sent it (`sender`, from the
    channel's own facts, never from the text) and where (`channel`, `chat_id`)."""

    channel: str
    chat_id: str
    content: str
    sender: Sender = field(default_factory=Sender)
    media: tuple[str, ...] = ()
    pressed: bool = False  # sent by pressing one of our buttons, not typed
    timestamp: datetime = field(default_factory=_now)
    id: str = field(default_factory=_new_id)
    seq: int | None = None  # its place in the inbox, when it came through one
    replayed: bool = False  # handed back after a restart: its turn may have begun already
    # How long a recording in `media` plays, by its path, as the channel was told (Telegram's
    # duration): the voice feature holds the longer of this and the file's own length to
    # voice.max_minutes.
    lengths: Mapping[str, float] = field(default_factory=dict, hash=False)
    prepare: Prepare | None = field(default=None, compare=False, repr=False)
    # What an API client's request adds to this turn (its tools, instructions, options).
    client: ClientTurn | None = field(default=None, compare=False, repr=False)

    @property
    def session_key(self) -> str:
        return f"{self.channel}:{self.chat_id}"

    @staticmethod
    def inbox_id(seq: int) -> str:
        """The same id for a message whenever it is replayed, so its turn can be found again."""
        return f"in-{seq}"


class MessageBus:
    """Bounded queues: a flood of messages waits at the door instead of growing memory."""

    def __init__(self, maxsize: int = 1000, inbox: Inbox | None = None) -> None:
        self._maxsize = self.maxsize = maxsize
        self._inbound: asyncio.Queue[InboundMessage] = asyncio.Queue(maxsize)
        self._take: Take | None = None  # the core, while it serves
        self.waiting = 0  # taken by the core, its turn not begun (kept by the core)
        self._outboxes: dict[str, asyncio.Queue[OutboundMessage]] = {}
        self._in_flight: dict[str, int] = {}  # taken from an outbox, not delivered yet
        self.inbox = inbox
        # Marking messages answered or done: a burst of replies shares a few thread hops.
        self._marks = ThreadBatch()
        self.retry_plan: RetryPlan | None = None  # set from agent.max_attempts (app.py)
        self._begun: set[int] = set()  # inbox messages whose counted attempt runs here
        self.retry_wake = asyncio.Event()  # a failure was recorded: its retry may come sooner
        self.turns: set[str] = set()  # channels told of each turn's start and end (pump_outbound)
        # The gateway stops: a reply waiting out a long rate limit waits for the next start.
        self.closing = asyncio.Event()

    # Durability: every call is a no-op without an inbox.

    async def receive(
        self,
        channel: str,
        items: list[tuple[str, dict[str, Any], Sender]],
        position: tuple[str, str] | None = None,
    ) -> list[int | None]:
        """Store (chat, payload, sender) items durably, with the channel's new position in its
        source, before the channel acknowledges them; their inbox numbers."""
        if self.inbox is None:
            return [None] * len(items)
        if not items and position is None:
            return []
        return list(await asyncio.to_thread(self.inbox.add, channel, items, position))

    async def position(self, name: str) -> str | None:
        return None if self.inbox is None else await asyncio.to_thread(self.inbox.position, name)

    async def unfinished(self, channel: str) -> list[Pending]:
        """Left by an earlier run, oldest first. Replies already made are queued for delivery
        here; the messages still waiting for theirs are returned for the channel to hand in
        (not those that failed: they wait for their retry, or for the owner when parked)."""
        if self.inbox is None:
            return []
        waiting = []
        for pending in await asyncio.to_thread(self.inbox.pending, channel):
            if pending.seq in self._begun:  # a retry that began meanwhile
                continue
            if pending.reply is not None:
                await self.publish_outbound(OutboundMessage.from_dict(pending.reply, pending.seq))
            elif not pending.failed:
                waiting.append(pending)
        return waiting

    async def answered(self, msg: InboundMessage, reply: OutboundMessage | None) -> None:
        """The turn is saved; the message stays until its reply is delivered."""
        if self.inbox is not None and msg.seq is not None:
            content = None if reply is None else reply.to_dict()
            self._begun.discard(msg.seq)
            await self._marks.run(self.inbox.answered, msg.seq, content)

    async def answer_for(self, seq: int | None, reply: OutboundMessage) -> None:
        """A channel answers a stored message itself (a greeting, a file too big): the answer
        is kept like a turn's reply, and the message leaves once it is delivered."""
        if self.inbox is not None and seq is not None:
            self._begun.discard(seq)
            await self._marks.run(self.inbox.answered, seq, reply.to_dict())

    async def begin(self, seq: int, preview: str) -> Pending | None:
        """Count an attempt at a stored message before it starts, so one that crashes, hangs
        or is killed with the process counts too; the message, parked instead, when its
        attempts are used up (None: go on)."""
        if self.inbox is None:
            return None
        self._begun.add(seq)
        try:
            parked = await self._marks.run(self.inbox.begin, seq, preview, self._plan())
        except BaseException:
            self._begun.discard(seq)
            raise
        if parked is not None:
            self._begun.discard(seq)
        return parked

    async def give_back(self, seq: int | None) -> None:
        """A counted attempt that our own graceful stop ended before its turn began."""
        if self.inbox is not None and seq is not None and seq in self._begun:
            self._begun.discard(seq)
            await self._marks.run(self.inbox.give_back, seq)

    async def failed(
        self, seq: int, error: str, preview: str, *, park: bool = False
    ) -> Pending | None:
        """Record a failed attempt at a stored message (its next one is planned, or it is
        parked: at once with `park`); the message as it is now, None when it is gone or there
        is no inbox."""
        if self.inbox is None:
            return None
        counted = seq in self._begun  # by `begin`, unless it failed before it began
        self._begun.discard(seq)
        plan = _never if park else self._plan()
        kept = await asyncio.to_thread(self.inbox.failed, seq, error, preview, plan, counted)
        self.retry_wake.set()
        return kept

    def _plan(self) -> RetryPlan:
        if self.retry_plan is None:  # a bus built without settings (tests): the defaults
            from nanomem.agent.retries import retry_delay

            return retry_delay
        return self.retry_plan

    async def delivered(self, reply: OutboundMessage) -> None:
        if self.inbox is not None and reply.seq is not None and reply.is_answer:
            await self._marks.run(self.inbox.done, reply.seq)

    async def forget(self, seq: int | None) -> None:
        """A message the channel answered itself or turned away after storing it."""
        if self.inbox is not None and seq is not None:
            self._begun.discard(seq)
            await self._marks.run(self.inbox.done, seq)

    # Queues.

    async def publish_inbound(self, msg: InboundMessage) -> None:
        """Hand a message to the core: straight to it while it serves (it keeps each chat's
        order and bounds what waits), else queued until it does (or a test reads it)."""
        if self._take is not None:
            await self._take(msg)
        else:
            await self._inbound.put(msg)

    def serve(self, take: Take | None) -> None:
        """The core takes inbound messages directly from now on (None: it stopped)."""
        self._take = take

    async def next_inbound(self, *, prepared: bool = True) -> InboundMessage:
        """The next queued message; `prepared`: with its channel's work on it done (as the core
        does it before a turn), skipping those the channel answered itself."""
        while True:
            msg = await self._inbound.get()
            if not prepared or msg.prepare is None:
                return msg
            if (ready := await msg.prepare(msg)) is not None:
                return replace(ready, prepare=None)

    def outbox(self, channel: str) -> asyncio.Queue[OutboundMessage]:
        """Each channel drains its own queue, so a stalled channel never delays another."""
        box = self._outboxes.get(channel)
        if box is None:
            box = self._outboxes[channel] = asyncio.Queue(self._maxsize)
        return box

    async def publish_outbound(self, msg: OutboundMessage) -> None:
        await self.outbox(msg.channel).put(msg)

    def sending(self, channel: str, change: int) -> None:
        self._in_flight[channel] = self._in_flight.get(channel, 0) + change

    @property
    def queued(self) -> int:
        """Messages handed in before the core served (see `serve`)."""
        return self._inbound.qsize()

    @property
    def inbound_depth(self) -> int:
        """Messages handed in whose turn has not begun."""
        return self._inbound.qsize() + self.waiting

    def outbound_depth(self) -> dict[str, int]:
        """Replies waiting or being delivered, per channel."""
        return {
            name: box.qsize() + self._in_flight.get(name, 0) for name, box in self._outboxes.items()
        }


def _never(attempts: int) -> None:
    """The retry plan of what a new attempt cannot change: parked at once."""
    return None
