"""channels/telegram/albums.py in-process: which stored rows a restart gathers again, and the
gatherer's order and its hand-off of what the chat sent meanwhile."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path
from typing import Any

from channels.telegram.albums import (
    ALBUM,
    Albums,
    Part,
    group_of,
    parts_of,
    replay_order,
    store_whole,
)
from nanomem.agent import MessageBus, Pending, SqliteInbox
from nanomem.audience import Sender


def update(update_id: int, message_id: int, group: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"message_id": message_id, "chat": {"id": 1}}
    if group:
        message["media_group_id"] = group
    return {"update_id": update_id, "message": message}


def row(seq: int, payload: dict[str, Any]) -> Pending:
    return Pending(seq, "telegram", "1", datetime.now(), payload, None)


def test_a_restart_forgets_parts_an_album_row_holds_and_gathers_the_rest() -> None:
    held, loose = update(1, 10, "a"), update(5, 20, "b")
    plain, album = update(2, 11), {ALBUM: [held, update(3, 12, "a")]}
    # A crash between storing album "a" as one row and forgetting its parts' rows.
    # Then a loose part of album "b", still to gather, and a message sent after it.
    left = [row(1, held), row(2, plain), row(4, album), row(5, loose), row(6, update(6, 21))]
    replay, forget = replay_order(left)
    assert [p.seq for p in replay] == [2, 4, 5, 6]  # as stored: 6 waits behind album "b"
    assert [p.seq for p in forget] == [1]


def test_a_stored_row_s_updates_and_album() -> None:
    album = {ALBUM: [update(1, 10, "a"), update(2, 11, "a")]}
    assert [u["update_id"] for u in parts_of(album)] == [1, 2]
    assert parts_of(update(3, 12)) == [update(3, 12)]
    assert group_of(update(1, 10, "a")) == "a" and group_of(update(3, 12)) is None


async def test_parts_come_out_once_in_the_order_sent_then_what_waited_behind() -> None:
    handed: list[Any] = []
    finished = asyncio.Event()

    async def done(parts: list[Part[str]]) -> None:
        handed.append([part.item for part in parts])

    async def publish(msg: Any) -> None:
        handed.append(msg)
        finished.set()

    albums: Albums[str] = Albums(done, publish, quiet_s=0.05, longest_s=5)
    albums.add("chat", "g", Part(2, update(2, 11, "g"), "second"))
    albums.add("chat", "g", Part(1, update(1, 10, "g"), "first"))
    albums.add("chat", "g", Part(1, update(1, 10, "g"), "first again"))  # fetched twice
    assert albums.waiting("chat") and not albums.waiting("other chat")
    albums.behind("chat", "a text sent after the album")
    await asyncio.wait_for(finished.wait(), 10)
    assert handed == [["first", "second"], "a text sent after the album"]
    assert not albums.waiting("chat")


async def test_stopping_drops_what_is_gathered_for_the_next_start() -> None:
    handed: list[Any] = []

    async def done(parts: list[Part[str]]) -> None:
        handed.append(parts)

    async def publish(msg: Any) -> None:
        handed.append(msg)

    albums: Albums[str] = Albums(done, publish, quiet_s=30, longest_s=30)
    albums.add("chat", "g", Part(1, update(1, 10, "g"), "first"))
    await albums.stop()
    assert handed == [] and not albums.waiting("chat")


class FullDiskOnce(SqliteInbox):
    """An inbox whose first write fails, as on a full disk."""

    failures = 1

    def add(self, channel: str, items: list[Any], position: tuple[str, str] | None) -> list[int]:
        if self.failures:
            self.failures -= 1
            raise OSError(28, "No space left on device")
        return super().add(channel, items, position)


async def test_an_album_that_cannot_be_stored_yet_is_stored_later_never_dropped(
    tmp_path: Path,
) -> None:
    inbox = FullDiskOnce(tmp_path / "inbox.db")
    bus = MessageBus(inbox=inbox)
    sender = Sender("1", "Ada", is_owner=True)
    parts = [update(1, 10, "g"), update(2, 11, "g")]
    inbox.failures = 0
    seqs = await bus.receive("telegram", [("1", p, sender) for p in parts], ("offset", "3"))
    inbox.failures = 1
    stored = [Part(seq, payload, "") for seq, payload in zip(seqs, parts, strict=True)]
    seq = await store_whole(bus, "telegram", "1", sender, stored)
    (left,) = await bus.unfinished("telegram")
    assert left.seq == seq and parts_of(left.payload) == parts and inbox.failures == 0
    inbox.close()
