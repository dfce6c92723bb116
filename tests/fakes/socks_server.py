"""Loopback SOCKS5 proxy for tests (RFC 1928 CONNECT, RFC 1929 user and password).

Like FakeProxy, every target a client asks for (a name that resolves nowhere included) is
reached at one loopback port, `target_port`; the bytes of the connection are carried both ways
as they are. With `credentials` it requires them (and refuses others with status 1). It records
what it saw, and runs on its own event loop in a daemon thread, so async and blocking tests use
it alike.
"""

from __future__ import annotations

import asyncio
import ipaddress

from tests.fakes.proxy_server import ThreadedTcpServer, carry

_HOST = "127.0.0.1"
_NO_AUTH, _PASSWORD, _NONE_ACCEPTABLE = 0x00, 0x02, 0xFF


class FakeSocks(ThreadedTcpServer):
    """A SOCKS5 proxy on 127.0.0.1; its records are safe to read from any thread."""

    thread_name = "fake-socks"

    def __init__(self, target_port: int, *, credentials: tuple[str, str] | None = None) -> None:
        super().__init__()
        self.target_port = target_port
        self.credentials = credentials
        self.connects: list[str] = []  # CONNECT targets as asked, e.g. "model.example.test:443"
        self.logins: list[tuple[str, str]] = []  # user and password of each login
        self.connections = 0

    @property
    def url(self) -> str:
        return f"socks5://{_HOST}:{self.port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            if await self._greet(reader, writer) and (target := await _request(reader)):
                self.connects.append(target)
                up_reader, up_writer = await asyncio.open_connection(_HOST, self.target_port)
                # Succeeded, bound to 0.0.0.0:0 (clients do not use it).
                writer.write(b"\x05\x00\x00\x01" + bytes(6))
                await writer.drain()
                try:
                    await asyncio.gather(carry(reader, up_writer), carry(up_reader, writer))
                finally:
                    up_writer.close()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _greet(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """The method negotiation and, when credentials are required, the login."""
        version, count = await reader.readexactly(2)
        methods = await reader.readexactly(count)
        wanted = _NO_AUTH if self.credentials is None else _PASSWORD
        if version != 5 or wanted not in methods:
            writer.write(bytes([5, _NONE_ACCEPTABLE]))
            return False
        writer.write(bytes([5, wanted]))
        if wanted == _NO_AUTH:
            return True
        _, size = await reader.readexactly(2)
        user = (await reader.readexactly(size)).decode()
        (size,) = await reader.readexactly(1)
        password = (await reader.readexactly(size)).decode()
        self.logins.append((user, password))
        allowed = (user, password) == self.credentials
        writer.write(bytes([1, 0 if allowed else 1]))
        return allowed


async def _request(reader: asyncio.StreamReader) -> str:
    """The CONNECT request's target as host:port ("" for another command)."""
    _, command, _, kind = await reader.readexactly(4)
    if kind == 1:
        host = str(ipaddress.IPv4Address(await reader.readexactly(4)))
    elif kind == 4:
        host = str(ipaddress.IPv6Address(await reader.readexactly(16)))
    else:  # 3: a name, resolved by the proxy (here: every name is the target port)
        (size,) = await reader.readexactly(1)
        host = (await reader.readexactly(size)).decode()
    port = int.from_bytes(await reader.readexactly(2), "big")
    return f"{host}:{port}" if command == 1 else ""
