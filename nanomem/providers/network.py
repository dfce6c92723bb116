"""httpcore's network backend on asyncio's own transports, for the lean client's pools.

httpcore's default backend wraps every read and write in anyio (a cancel scope for each
timeout, a checkpoint, a poll(2) of each idle socket per request): about a third of a call's
CPU on loopback. This one reads from a buffer asyncio's protocol fills, bounds a wait with
asyncio's own timeout only when it has to wait, and sends a request's head and its body in one
write. HTTP itself (h11), the pool, proxies, SOCKS and TLS stay httpcore's.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore

_LIMIT = 256 * 1024  # bytes buffered unread before the socket stops being read
_HOLD = 8 * 1024  # a write shorter than this waits for the next one (a request's head)


class _Protocol(asyncio.Protocol):
    """Bytes as they arrive, the end of the stream, and whether writing must wait."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.ended = False
        self.error: Exception | None = None
        self.paused = False  # the transport's buffer is full: writing waits
        self._reading = True
        self._waiter: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > _LIMIT and self._reading and self.transport is not None:
            self.transport.pause_reading()
            self._reading = False
        self._wake()

    def eof_received(self) -> bool:
        self.ended = True
        self._wake()
        return False  # close the transport: nothing more is written after the answer ends

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        self.error = exc
        self._wake()
        self.resume_writing()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    def take(self, most: int) -> bytes:
        if len(self.buffer) <= most:
            data = bytes(self.buffer)
            self.buffer.clear()
        else:
            data = bytes(self.buffer[:most])
            del self.buffer[:most]
        if not self._reading and len(self.buffer) <= _LIMIT // 2 and self.transport is not None:
            self.transport.resume_reading()
            self._reading = True
        return data

    async def arrival(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    async def drained(self) -> None:
        if self.paused:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class Stream(httpcore.AsyncNetworkStream):
    """One connection's bytes: what the protocol buffered is read without waiting. (The
    `timeout` arguments are httpcore's interface.)"""

    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport, self._protocol = transport, protocol
        self._held = b""

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        if self._held and not self._transport.is_closing():  # else: the read finds out
            self._flush()
        protocol = self._protocol
        if not protocol.buffer and not protocol.ended:
            try:
                async with asyncio.timeout(timeout):
                    while not protocol.buffer and not protocol.ended:
                        await protocol.arrival()
            except TimeoutError:
                raise httpcore.ReadTimeout("timed out") from None
        if protocol.buffer:
            return protocol.take(max_bytes)
        if protocol.error is not None:
            raise httpcore.ReadError(str(protocol.error)) from protocol.error
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if not buffer:
            return
        if not self._held and len(buffer) < _HOLD:
            self._held = buffer  # sent with what follows, or before the next read
            return
        self._flush(buffer)
        if self._protocol.paused:
            try:
                async with asyncio.timeout(timeout):
                    await self._protocol.drained()
            except TimeoutError:
                raise httpcore.WriteTimeout("timed out") from None
        if self._protocol.error is not None:
            raise httpcore.WriteError(str(self._protocol.error))

    def _flush(self, more: bytes = b"") -> None:
        data, self._held = self._held + more if self._held else more, b""
        if data:
            if self._transport.is_closing():
                raise httpcore.WriteError("the connection is closed")
            self._transport.write(data)

    async def aclose(self) -> None:
        self._held = b""
        self._transport.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
    ) -> httpcore.AsyncNetworkStream:
        self._flush()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport = await loop.start_tls(
                    self._transport, self._protocol, ssl_context, server_hostname=server_hostname
                )
        except TimeoutError:
            self._transport.close()
            raise httpcore.ConnectTimeout("timed out") from None
        except (OSError, ssl.SSLError, ConnectionError) as exc:
            self._transport.close()
            raise httpcore.ConnectError(str(exc)) from exc
        if transport is None:
            raise httpcore.ConnectError("the connection closed during the TLS handshake")
        assert isinstance(transport, asyncio.Transport)
        self._protocol.transport = transport
        return Stream(transport, self._protocol)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # idle, yet something came: the server hung up (or broke HTTP)
            return bool(self._protocol.buffer) or self._protocol.ended
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        if info in ("ssl_object", "socket"):
            return self._transport.get_extra_info(info)
        return None


class Backend(httpcore.AsyncNetworkBackend):
    """Connections made by asyncio's event loop (happy eyeballs as anyio does it)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = (local_address, 0) if local_address else None
        # A name may have several addresses, tried as anyio does (happy eyeballs); an address
        # needs no race (asyncio's costs ~0.05-0.1 ms of CPU a connection).
        race = None if _is_address(host) else 0.25
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(
                    _Protocol, host, port, local_addr=local, happy_eyeballs_delay=race
                )
        except TimeoutError:
            raise httpcore.ConnectTimeout("timed out") from None
        except (OSError, UnicodeError) as exc:  # UnicodeError: a name IDNA cannot encode
            raise httpcore.ConnectError(str(exc)) from exc
        return _opened(transport, protocol, socket_options)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_unix_connection(_Protocol, path)
        except TimeoutError:
            raise httpcore.ConnectTimeout("timed out") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        return _opened(transport, protocol, socket_options)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _opened(
    transport: asyncio.BaseTransport,
    protocol: _Protocol,
    options: Iterable[httpcore.SOCKET_OPTION] | None,
) -> Stream:
    assert isinstance(transport, asyncio.Transport)
    sock: socket.socket | None = transport.get_extra_info("socket")
    if sock is not None:
        for option in options or ():
            sock.setsockopt(*option)
    return Stream(transport, protocol)
