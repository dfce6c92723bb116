"""The gateway's connection limits on a real asyncio server: a connection over the limit takes
the place of the one waiting longest without a request in progress, and is refused at once only
when every open one is being answered."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from nanomem.gateway.connection_guard import ConnectionGuard
from tests.helpers import until

LIMIT = 3


class Requests(asyncio.Protocol):
    """Stands in for the HTTP server: `BUSY` starts a request, `DONE` ends it."""

    def __init__(self, guard: ConnectionGuard) -> None:
        self.guard = guard
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if data == b"BUSY":
            self.guard.request_started(self.transport)
        elif data == b"DONE":
            self.guard.request_ended(self.transport)


Client = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@pytest.fixture
async def served() -> AsyncIterator[tuple[ConnectionGuard, int]]:
    guard = ConnectionGuard(LIMIT, read_timeout_s=60)
    server = await asyncio.get_running_loop().create_server(
        guard.wrap(lambda: Requests(guard)), "127.0.0.1", 0
    )
    yield guard, server.sockets[0].getsockname()[1]
    server.close()


def busy(guard: ConnectionGuard) -> int:
    return sum(watched.busy for watched in guard.by_transport.values())


async def closed(client: Client) -> bool:
    try:
        return await asyncio.wait_for(client[0].read(), 10) == b""
    except ConnectionResetError:
        return True


async def connect(port: int, send: bytes = b"") -> Client:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if send:
        writer.write(send)
        await writer.drain()
    return reader, writer


async def test_a_new_connection_takes_the_place_of_the_oldest_waiting_one(
    served: tuple[ConnectionGuard, int],
) -> None:
    guard, port = served
    waiting = [await connect(port) for _ in range(LIMIT)]
    await until(lambda: len(guard.by_transport) == LIMIT)
    newcomer = await connect(port, b"BUSY")
    assert await closed(waiting[0])  # the longest waiting made room
    await until(lambda: busy(guard) == 1)
    assert guard.open == LIMIT
    newcomer[1].write(b"still here")
    await newcomer[1].drain()
    assert not newcomer[0].at_eof()
    for _, writer in [*waiting, newcomer]:
        writer.close()


async def test_when_every_connection_is_being_answered_a_new_one_is_refused_at_once(
    served: tuple[ConnectionGuard, int],
) -> None:
    guard, port = served
    answering = [await connect(port, b"BUSY") for _ in range(LIMIT)]
    await until(lambda: busy(guard) == LIMIT)
    assert await closed(await connect(port))
    # Nobody being answered was cut off to make room.
    assert guard.open == LIMIT and not any(w.evicted for w in guard.by_transport.values())
    # One answer ends: that connection waits again, and the next newcomer takes its place.
    answering[1][1].write(b"DONE")
    await answering[1][1].drain()
    await until(lambda: busy(guard) == LIMIT - 1)
    await connect(port)
    assert await closed(answering[1])
    assert guard.open == LIMIT
    for _, writer in answering:
        writer.close()


async def test_a_burst_accepted_at_once_makes_room_instead_of_refusing_its_tail(
    served: tuple[ConnectionGuard, int],
) -> None:
    """asyncio accepts a burst in one go and makes every protocol before any hears that it is
    connected: the tail of the burst, a health check among it, must still get in."""
    guard, port = served
    burst = await asyncio.gather(*(connect(port) for _ in range(LIMIT + 2)))
    await until(lambda: guard.open == LIMIT and len(guard.by_transport) == LIMIT)
    assert [await closed(client) for client in burst[:2]] == [True, True]
    for _, writer in burst[2:]:
        writer.write(b"still here")
        await writer.drain()
    await asyncio.sleep(0.1)
    assert not any(reader.at_eof() for reader, _ in burst[2:])
    for _, writer in burst:
        writer.close()
