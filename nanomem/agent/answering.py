"""Which message of each chat is being answered now, from when it is taken to when its reply
is queued: background work begun by a turn (a task it spawned) waits for that, so what it
tells the chat comes after the turn's own reply ("started task …")."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager


class Answering:
    def __init__(self) -> None:
        self._now: dict[str, asyncio.Event] = {}  # set once that message's reply is queued

    @contextmanager
    def answering(self, key: str) -> Iterator[None]:
        replied = self._now[key] = asyncio.Event()
        try:
            yield
        finally:
            replied.set()
            if self._now.get(key) is replied:
                del self._now[key]

    def replied(self, key: str) -> asyncio.Event | None:
        """Set once the message of this chat being answered now has its reply queued; None
        when none is (a direct call, the API: nothing to come after)."""
        return self._now.get(key)
