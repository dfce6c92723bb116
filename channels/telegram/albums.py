"""Telegram albums: the parts of one (updates sharing a `media_group_id`, which Telegram sends
one by one, perhaps in different getUpdates answers) gathered into one message.

Durable as every update is: each part is stored in the inbox as it comes, with the offset that
confirms it. Once no part has come for `quiet_s` (at most `longest_s` after the first), the
channel stores the whole album as one inbox row (`{"album": [update, ...]}`), then forgets the
parts' rows, then hands the album in. A crash before the album row leaves the parts, gathered
again at the next start; one between the album row and the forgetting leaves parts the album
row already holds, which the replay forgets (`replay_order`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from loguru import logger

from nanomem.agent import MessageBus, Pending, receive_until_stored
from nanomem.audience import Sender

ALBUM = "album"  # a stored album: {"album": [the parts' updates, in order]}
Item = TypeVar("Item")


@dataclass(frozen=True)
class Part(Generic[Item]):
    """One part: its inbox row, its update as stored, and what the channel made of it."""

    seq: int | None
    payload: dict[str, Any]
    item: Item


@dataclass
class _Open(Generic[Item]):
    first: float
    last: float
    parts: list[Part[Item]] = field(default_factory=list)
    more: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


def group_of(payload: dict[str, Any]) -> str | None:
    """The album a stored update is a part of (its message's media_group_id), if any."""
    message = payload.get("message")
    group = message.get("media_group_id") if isinstance(message, dict) else None
    return str(group) if group else None


def parts_of(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The updates of a stored row: an album's parts, or the one update it is."""
    parts = payload.get(ALBUM)
    return [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else [payload]


def replay_order(left: list[Pending]) -> tuple[list[Pending], list[Pending]]:
    """An earlier run's rows: (to hand in again, in the order they were stored; parts an album
    row already holds, to forget). Handed in in that order, an album's loose parts go to the
    gatherer and what the chat sent after them waits behind the album, as it did before."""
    held = {
        part.get("update_id")
        for pending in left
        if ALBUM in pending.payload
        for part in parts_of(pending.payload)
    }
    replay: list[Pending] = []
    forget: list[Pending] = []
    for pending in sorted(left, key=lambda p: p.seq):
        loose = ALBUM not in pending.payload and group_of(pending.payload) is not None
        held_part = loose and pending.payload.get("update_id") in held
        (forget if held_part else replay).append(pending)
    return replay, forget


async def store_whole(
    bus: MessageBus, channel: str, chat: str, sender: Sender, parts: list[Part[Item]]
) -> int | None:
    """The album as one inbox row, then its parts' rows gone (in that order: see above)."""
    album = {ALBUM: [part.payload for part in parts]}
    (seq,) = await receive_until_stored(bus, channel, [(chat, album, sender)], "an album")
    for part in parts:
        await bus.forget(part.seq)
    return seq


class Albums(Generic[Item]):
    """Parts waiting for the rest of their album, by (chat, media_group_id). `done(parts)` gets
    each album once, its parts in the order they were sent; what the chat sent after an album
    begins waits behind it (`behind`), so the chat's order holds."""

    def __init__(
        self,
        done: Callable[[list[Part[Item]]], Awaitable[None]],
        publish: Callable[[Any], Awaitable[None]],
        *,
        quiet_s: float,
        longest_s: float,
    ) -> None:
        self._done, self._publish = done, publish
        self.quiet_s, self.longest_s = quiet_s, longest_s
        self._open: dict[tuple[str, str], _Open[Item]] = {}
        self._behind: dict[str, list[Any]] = {}

    def add(self, chat: str, group: str, part: Part[Item]) -> None:
        now = asyncio.get_running_loop().time()
        found = self._open.get((chat, group))
        if found is None:
            found = self._open[(chat, group)] = _Open(now, now)
            found.task = asyncio.create_task(self._wait(chat, group, found), name="telegram-album")
        found.last = now
        found.more.set()
        if all(p.payload.get("update_id") != part.payload.get("update_id") for p in found.parts):
            found.parts.append(part)

    def waiting(self, chat: str) -> bool:
        """Whether an album of this chat is still being gathered."""
        return any(key[0] == chat for key in self._open)

    def behind(self, chat: str, msg: Any) -> None:
        """A message of the chat to hand in once its albums are."""
        self._behind.setdefault(chat, []).append(msg)

    async def _wait(self, chat: str, group: str, album: _Open[Item]) -> None:
        loop = asyncio.get_running_loop()
        while (left := min(album.last + self.quiet_s, album.first + self.longest_s)) > loop.time():
            album.more.clear()  # set by the next part: the wait starts again from it
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(album.more.wait(), left - loop.time())
        del self._open[(chat, group)]
        parts = sorted(album.parts, key=lambda p: _message_id(p.payload))
        try:
            await self._done(parts)
        except Exception:  # its parts stay in the inbox: gathered again at the next start
            logger.exception("telegram: could not take an album of {} in {}", len(parts), chat)
        if not self.waiting(chat):
            for msg in self._behind.pop(chat, []):
                await self._publish(msg)

    async def stop(self) -> None:
        """Stop gathering: the parts are in the inbox, and the next start gathers them again."""
        tasks = [album.task for album in self._open.values() if album.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._open.clear()
        self._behind.clear()  # stored too: replayed in order at the next start


def _message_id(payload: dict[str, Any]) -> int:
    message = payload.get("message")
    number = message.get("message_id") if isinstance(message, dict) else None
    return number if isinstance(number, int) else 0
