"""Limits on the gateway's HTTP connections: how many may be open, and how long one may take to
send a request. aiohttp has neither (a client trickling its headers a byte at a time holds a
connection, and a file descriptor, for as long as it likes)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from loguru import logger

REPORT_EVERY_S = 60.0  # at most one log line per interval, however many connections it covers


class _Refuse(asyncio.Protocol):
    """A connection over the limit: closed at once, before any parser or handler exists."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.abort()


_REFUSE = _Refuse()  # stateless: one for every refused connection


class _Watched(asyncio.Protocol):
    """The HTTP server's own protocol, closed when no request arrives in time."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self.guard, self.inner = guard, inner
        self.transport: asyncio.Transport | None = None
        self.busy = 0  # requests being answered on this connection
        self.evicted = False  # closed to make room; no longer counted as open
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.guard.by_transport[transport] = self
        self.inner.connection_made(transport)
        if self.evicted:  # made room for a later one of the same burst before it was told
            transport.abort()
        else:
            self.arm()

    def arm(self) -> None:
        """From now, the next request's headers (or the client's leaving) must come in time."""
        self.disarm()
        loop = asyncio.get_running_loop()
        self._deadline = loop.call_later(self.guard.read_timeout_s, self._expire)

    def disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if self.busy == 0 and self.transport is not None and not self.evicted:
            self.guard.timed_out += 1
            self.transport.abort()  # nothing of ours to flush; a slow reader gets no more time
            self.guard.report()

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm()
        if not self.evicted:
            self.guard.open -= 1
        self.guard.watched.pop(self, None)
        if self.transport is not None:
            self.guard.by_transport.pop(self.transport, None)
        self.transport = None
        self.inner.connection_lost(exc)


class ConnectionGuard:
    """A protocol factory in front of the HTTP server's: at `limit` open connections a new one
    takes the place of the one that has waited longest without a request being answered (or is
    closed at once when every one is busy answering), and a connection closes when a request's
    headers have not arrived `read_timeout_s` after it opened (or after its previous answer)."""

    def __init__(self, limit: int, read_timeout_s: float) -> None:
        self.limit, self.read_timeout_s = limit, read_timeout_s
        self.open = 0
        self.refused = self.timed_out = self.made_room = 0  # since the last report
        self.by_transport: dict[asyncio.BaseTransport, _Watched] = {}
        # Every open connection, oldest first. asyncio makes the protocols of a whole accepted
        # burst before telling any of them its transport, so by_transport alone would miss the
        # burst's head when its tail needs room, and refuse a health check in that tail.
        self.watched: dict[_Watched, None] = {}
        self._factory: Callable[[], Any] | None = None
        self._reported = 0.0

    def wrap(self, factory: Callable[[], Any]) -> Callable[[], asyncio.BaseProtocol]:
        self._factory = factory
        return self._new

    def _new(self) -> asyncio.BaseProtocol:
        if self.open >= self.limit and not self._make_room():
            self.refused += 1
            self.report()
            return _REFUSE
        assert self._factory is not None
        self.open += 1
        watched = _Watched(self, self._factory())
        self.watched[watched] = None
        return watched

    def _make_room(self) -> bool:
        """Close the oldest connection with no request in progress. Clients trickling their
        headers hold every slot otherwise, and `/health` (a monitor, the Docker health check)
        would be refused for as long as they keep reconnecting; a quick request gets in and is
        answered before the newest tricklers come round to it."""
        for watched in self.watched:
            if watched.busy == 0 and not watched.evicted:
                watched.evicted = True
                self.open -= 1
                self.made_room += 1
                if watched.transport is not None:  # else aborted once it hears of its transport
                    watched.transport.abort()
                self.report()
                return True
        return False

    def request_started(self, transport: asyncio.BaseTransport | None) -> None:
        if (watched := self.by_transport.get(transport)) is not None:  # type: ignore[arg-type]
            watched.busy += 1
            watched.disarm()

    def request_ended(self, transport: asyncio.BaseTransport | None) -> None:
        if (watched := self.by_transport.get(transport)) is not None:  # type: ignore[arg-type]
            watched.busy -= 1
            if watched.busy == 0:
                watched.arm()

    def report(self) -> None:
        """One line per interval for all refused and timed-out connections, never one each."""
        now = time.monotonic()
        if now - self._reported < REPORT_EVERY_S:
            return
        self._reported = now
        logger.warning(
            "gateway: at gateway.max_connections ({}), closed {} waiting connections to make "
            "room and refused {} while every one was busy; closed {} that sent no request "
            "within gateway.read_timeout_s ({:g} s) (said at most once a minute)",
            self.limit,
            self.made_room,
            self.refused,
            self.timed_out,
            self.read_timeout_s,
        )
        self.refused = self.timed_out = self.made_room = 0
