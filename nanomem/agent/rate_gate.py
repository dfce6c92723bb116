"""A platform's rate limits as a channel meets them: per chat, and channel-wide where the
platform has one bucket for everything (docs/channels.md).

The platform's own word comes first: its `retry_after` blocks the chat (or the channel) until
then. A channel may also pace itself: at most `per_s` calls a second across the channel, at
most `edits_per_s` streaming edits a second across the channel (when many chats stream, each
grows in fewer, larger steps; whole messages never wait for it), and edits of one chat no
closer than the `every_s` it gives. Whole messages come before streaming
edits and progress: a reply never waits behind an edit, and an edit waits while a reply is on
its way (the channel then shows its newest text, never each one it missed).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

# While a reply is on its way an edit looks again this often (it gives way, never queues).
HELD_S = 0.05


@dataclass(eq=False)
class _Chat:
    blocked_until: float = 0.0  # the platform's flood wait (monotonic)
    edit_at: float = 0.0  # no edit before this: the chat's own pace
    replies: int = 0  # whole messages waiting for their turn or being sent
    free: asyncio.Event = field(default_factory=asyncio.Event)  # set while replies == 0

    def __post_init__(self) -> None:
        self.free.set()


class RateGate:
    """What a channel asks before each call to its platform; cheap for a chat never limited."""

    def __init__(self, *, per_s: float = 0.0, edits_per_s: float = 0.0) -> None:
        self.per_s = per_s  # the channel's calls a second, across chats (0: no pace of ours)
        self.edits_per_s = edits_per_s  # its edits a second, across chats (0: no such pace)
        self._chats: dict[str, _Chat] = {}
        self._blocked_until = 0.0  # a channel-wide flood wait
        self._next_at = 0.0  # the channel's next call, paced by per_s
        self._next_edit_at = 0.0  # the channel's next edit, paced by edits_per_s

    def block(self, chat: str | None, seconds: float) -> None:
        """The platform said to wait (`retry_after`): this chat, or every chat (None)."""
        until = time.monotonic() + seconds
        if chat is None:
            self._blocked_until = max(self._blocked_until, until)
        else:
            state = self._chat(chat)
            state.blocked_until = max(state.blocked_until, until)

    def wait_s(self, chat: str) -> float:
        """Seconds before anything may be sent to this chat (a flood wait, the chat's or the
        channel's); 0 when it may be now."""
        state = self._chats.get(chat)
        until = max(self._blocked_until, state.blocked_until if state else 0.0)
        return max(0.0, until - time.monotonic())

    def edit_in_s(self, chat: str) -> float:
        """Seconds before an edit (a growing reply, a progress line) may go: after a flood wait,
        the chat's pace, and any whole message on its way (then a short look again)."""
        state = self._chats.get(chat)
        paced = max(self._reply_in_s(chat), self._next_edit_at - time.monotonic())
        if state is None:
            return paced
        if state.replies:
            return max(HELD_S, paced)
        return max(paced, state.edit_at - time.monotonic())

    def edited(self, chat: str, every_s: float) -> None:
        """An edit goes now: the chat's next one no sooner than `every_s` from now."""
        now = time.monotonic()
        self._chat(chat).edit_at = now + every_s
        self._paced()
        if self.edits_per_s > 0:
            self._next_edit_at = max(self._next_edit_at, now) + 1.0 / self.edits_per_s

    @asynccontextmanager
    async def reply(self, chat: str) -> AsyncIterator[None]:
        """Hold the chat for a whole message: edits wait meanwhile; the message waits out the
        flood waits and the channel's pace only, never an edit."""
        state = self._chat(chat)
        state.replies += 1
        state.free.clear()
        try:
            wait = self._reply_in_s(chat)
            while wait > 0:  # a flood wait may grow meanwhile (a refused edit's retry_after)
                await asyncio.sleep(wait)
                wait = self._reply_in_s(chat)
            self._paced()
            yield
        finally:
            state.replies -= 1
            if not state.replies:
                state.free.set()
                self.forget(chat)

    async def replies_sent(self, chat: str) -> None:
        """Until no whole message is on its way to this chat."""
        if (state := self._chats.get(chat)) is not None:
            await state.free.wait()

    def forget(self, chat: str) -> None:
        """Drop a chat nothing binds any more (its waits are over), so the map stays small."""
        state = self._chats.get(chat)
        if state is None or state.replies:
            return
        if max(state.blocked_until, state.edit_at) <= time.monotonic():
            del self._chats[chat]

    def _reply_in_s(self, chat: str) -> float:
        return max(self.wait_s(chat), self._next_at - time.monotonic())

    def _chat(self, chat: str) -> _Chat:
        state = self._chats.get(chat)
        if state is None:
            state = self._chats[chat] = _Chat()
        return state

    def _paced(self) -> None:
        if self.per_s > 0:
            self._next_at = max(self._next_at, time.monotonic()) + 1.0 / self.per_s
