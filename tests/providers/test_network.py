"""The lean client's network backend on asyncio (providers/network.py) under httpcore: bodies
larger than the socket buffers both ways, a server that stops reading, and the pools using it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from nanomem.providers.network import Backend
from tests.helpers.http import connected, fetch, ok, raw_server

BIG = 16 * 2**20  # well past what loopback's socket buffers hold


async def test_the_pools_make_their_connections_with_the_asyncio_backend() -> None:
    async with raw_server(lambda n: ok(b"fine")) as url, connected(url) as pool:
        assert await fetch(pool) == (200, b"fine")
        # An httpcore upgrade that stops taking the backend fails here, not silently.
        assert all(isinstance(each.connections._network_backend, Backend) for each in pool._pools)
    assert pool.opened == 1


async def test_a_body_larger_than_the_socket_buffers_goes_whole() -> None:
    async def echo_size(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        body = await reader.readexactly(length)
        writer.write(ok(b"%d %d" % (len(body), body.count(b"x"))))
        await writer.drain()
        writer.close()

    async with serving(echo_size) as url, connected(url) as pool, pool.post(b"x" * BIG, {}) as r:
        assert await r.read() == b"%d %d" % (BIG, BIG)


async def test_an_answer_larger_than_the_read_buffer_arrives_whole() -> None:
    body = bytes(range(256)) * (BIG // 256)
    async with raw_server(lambda n: ok(body)) as url, connected(url) as pool:
        for _ in range(2):  # and the connection is kept for the next call
            async with pool.post(b"{}", {}) as resp:
                assert await resp.read(limit=2 * BIG) == body
    assert pool.opened == 1


async def test_a_server_that_stops_reading_times_the_write_out() -> None:
    async with serving(never_reads) as url, connected(url, timeout_s=0.5) as pool:
        with pytest.raises(TimeoutError):
            async with pool.post(b"x" * BIG, {}):
                pass


async def never_reads(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await asyncio.Event().wait()  # until the server is closed


@asynccontextmanager
async def serving(handle: object) -> AsyncIterator[str]:
    server = await asyncio.start_server(handle, "127.0.0.1", 0)  # type: ignore[arg-type]
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1/chat/completions"
    finally:
        server.close()
