"""Loopback HTTP proxy for tests: CONNECT tunnels and absolute-form forwarding.

Every host a client asks for is mapped to one loopback port (`target_port`), so a client can ask
for `model.example.test:443`, a name that resolves nowhere, and reach a local fake. A CONNECT
tunnel carries bytes both ways as they are; with `terminate` (a server TLS context) the proxy
itself plays the target's TLS end inside the tunnel and forwards plain HTTP to the port, which
puts TLS in front of a plain fake such as FakeOpenAI. Optional Basic credentials are required
(407 otherwise); `tls` makes it an https:// proxy. It records what it saw. It runs on its own
event loop in a daemon thread, so async and blocking tests use it alike.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import shutil
import ssl
import subprocess
import threading
from pathlib import Path
from types import TracebackType
from typing import Self
from urllib.parse import urlsplit

_HOST = "127.0.0.1"


class ThreadedTcpServer:
    """A TCP server on 127.0.0.1, on its own event loop in a daemon thread (so async and
    blocking tests use it alike); a subclass handles each connection in `_handle`."""

    thread_name = "fake-tcp"

    def __init__(self, server_tls: ssl.SSLContext | None = None) -> None:
        self.port = 0
        self._server_tls = server_tls
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        ready = threading.Event()
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._serve(ready)), name=self.thread_name, daemon=True
        )
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError(f"{type(self).__name__} did not start within 10 s")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def _serve(self, ready: threading.Event) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        server = await asyncio.start_server(self._handle, _HOST, 0, ssl=self._server_tls)
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        await self._stop.wait()
        server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class FakeProxy(ThreadedTcpServer):
    """A scriptless HTTP proxy on 127.0.0.1; its records are safe to read from any thread."""

    thread_name = "fake-proxy"

    def __init__(
        self,
        target_port: int,
        *,
        credentials: tuple[str, str] | None = None,
        terminate: ssl.SSLContext | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(tls)
        self.target_port = target_port
        self.credentials = credentials
        self.terminate, self.tls = terminate, tls
        self.connects: list[str] = []  # CONNECT targets, e.g. "model.example.test:443"
        self.request_lines: list[str] = []  # every request line, CONNECT and forwarded alike
        self.authorizations: list[str | None] = []  # Proxy-Authorization of each request
        self.connections = 0  # client connections accepted

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{_HOST}:{self.port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        upstream: asyncio.StreamWriter | None = None
        pipe: asyncio.Task[None] | None = None
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line, headers = _parse(head)
                self.request_lines.append(line)
                self.authorizations.append(headers.get("proxy-authorization"))
                if not self._allowed(headers.get("proxy-authorization")):
                    await _answer(writer, b"407 Proxy Authentication Required", close=True)
                    return
                method, target, _ = line.split(" ", 2)
                if method == "CONNECT":
                    self.connects.append(target)
                    await self._tunnel(reader, writer)
                    return
                # Absolute form: forward to the target in origin form, answers piped back.
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if upstream is None:
                    up_reader, upstream = await asyncio.open_connection(_HOST, self.target_port)
                    pipe = asyncio.create_task(carry(up_reader, writer))
                parts = urlsplit(target)
                path = parts.path + (f"?{parts.query}" if parts.query else "")
                kept = [
                    raw
                    for raw in head.split(b"\r\n")[1:]
                    if raw and not raw.lower().startswith(b"proxy-authorization:")
                ]
                upstream.write(
                    b"\r\n".join([f"{method} {path} HTTP/1.1".encode(), *kept]) + b"\r\n\r\n"
                )
                upstream.write(body)
                await upstream.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError, ValueError):
            pass
        finally:
            if pipe is not None:
                pipe.cancel()
            if upstream is not None:
                upstream.close()
            writer.close()

    def _allowed(self, authorization: str | None) -> bool:
        if self.credentials is None:
            return True
        expected = base64.b64encode(":".join(self.credentials).encode()).decode()
        return authorization == f"Basic {expected}"

    async def _tunnel(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(_HOST, self.target_port)
        await _answer(writer, b"200 Connection established")
        if self.terminate is not None:  # be the target's TLS end ourselves
            await writer.start_tls(self.terminate)
        try:
            await asyncio.gather(carry(reader, up_writer), carry(up_reader, writer))
        finally:
            up_writer.close()


def _parse(head: bytes) -> tuple[str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for raw in lines[1:]:
        name, _, value = raw.partition(":")
        if name:
            headers[name.strip().lower()] = value.strip()
    return lines[0], headers


async def _answer(writer: asyncio.StreamWriter, status: bytes, *, close: bool = False) -> None:
    extra = b'Proxy-Authenticate: Basic realm="fake"\r\nContent-Length: 0\r\n' if close else b""
    writer.write(b"HTTP/1.1 " + status + b"\r\n" + extra + b"\r\n")
    await writer.drain()


async def carry(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Bytes from `source` to `sink` until its end, then the end passed on."""
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    with contextlib.suppress(OSError, RuntimeError):
        if sink.can_write_eof():
            sink.write_eof()
        else:
            sink.close()


def make_certificate(folder: Path, *names: str) -> tuple[Path, Path] | None:
    """A self-signed certificate (cert.pem, key.pem) for these DNS names and 127.0.0.1,
    made with the `openssl` command; None when it is missing (the caller skips)."""
    if shutil.which("openssl") is None:
        return None
    key, cert = folder / "key.pem", folder / "cert.pem"
    alt = ",".join(["IP:127.0.0.1", *(f"DNS:{name}" for name in names)])
    command = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    command += ["-keyout", str(key), "-out", str(cert), "-subj", f"/CN={names[0]}"]
    command += ["-addext", f"subjectAltName={alt}"]
    subprocess.run(command, check=True, capture_output=True)
    return cert, key


def server_context(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    return context
