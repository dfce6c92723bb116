"""A small HTTP/1.1 client on asyncio streams, for the lean model client (openai_http.py).

Importing aiohttp costs ~0.15 s of CPU, a third of a one-shot `nanomem chat -m`. The lean
client needs only this: POST a body, read the status, headers and body (by Content-Length,
chunked, or to the end of the connection), line by line for server-sent events, over TCP or
TLS (verified against the system's certificates, as aiohttp's default context does), with
connections kept alive and reused. It follows no redirects and offers no compression.

Through the proxy that proxies.py finds in the environment (http:// or https://, Basic
credentials): an https:// target over a CONNECT tunnel, TLS to the target inside it (TLS in
TLS for an https:// proxy, which asyncio supports since Python 3.11); an http:// target by its
absolute URL. Connections through a proxy are pooled apart from direct ones.

Timeouts bound connecting (a free connection included) and each read or write: a reply may
stream for as long as the server keeps sending. Failures of the connection or the protocol
raise HTTPError; a timeout raises TimeoutError.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import quote, urlsplit

from nanomem.providers.proxies import Proxy, proxy_for

if TYPE_CHECKING:
    import ssl

T = TypeVar("T")
Origin = tuple[str, str, int]  # scheme, host, port
Key = tuple[Origin, Proxy | None]  # what a kept-alive connection may be reused for

IDLE_S = 15.0  # an idle connection older than this is closed, not reused (aiohttp's default)
_MAX_HEAD = 64 * 1024  # the status line and headers of a response
_READ = 64 * 1024
MAX_BODY = 64 * 2**20  # a body read whole: past this a broken or hostile server is refused


class HTTPError(Exception):
    """The connection failed or the server broke HTTP."""

    def __init__(self, message: str, *, answered: bool = True) -> None:
        super().__init__(message)
        self.answered = answered  # False: not one byte of an answer had come


class HeaderError(HTTPError):
    """A header value cannot be sent as it is (nothing was sent)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, answered=False)


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.idle_since = 0.0
        self.reused = False

    def usable(self) -> bool:
        fresh = time.monotonic() - self.idle_since < IDLE_S
        return fresh and not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


class Response:
    """Status, headers (lowercase names) and the body, read whole or line by line."""

    def __init__(
        self,
        conn: _Connection,
        status: int,
        headers: dict[str, str],
        read_s: float,
        reason: str = "",  # of the status line ("Not Found")
    ) -> None:
        self.status, self.headers, self.reason = status, headers, reason
        self._conn, self._read_s = conn, read_s
        self._pending = bytearray()
        self._left = 0  # bytes left in the body (length) or in the current chunk (chunked)
        self._done = status in (204, 304)
        encoding = headers.get("transfer-encoding", "").lower()
        if "chunked" in encoding:
            self._mode = "chunked"
        elif (length := headers.get("content-length")) is not None:
            self._mode = "length"
            if not (length.isascii() and length.isdigit()):  # int() takes "-1" and " +1_0"
                raise HTTPError(f"bad Content-Length: {length[:40]!r}")
            self._left = int(length)
            self._done = self._done or self._left == 0
        else:
            self._mode = "eof"
        close = "close" in headers.get("connection", "").lower()
        self.reusable = self._mode != "eof" and not close

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";", 1)[0].strip().lower()

    @property
    def complete(self) -> bool:
        return self._done and not self._pending

    async def finish(self, within: float) -> None:
        """Read what is left of a small body that is on its way (the end of a stream after
        its last event), so the connection can be reused; give up quietly otherwise."""
        taken = len(self._pending)
        try:
            async with asyncio.timeout(within):
                while taken <= _READ and (piece := await self._more()):
                    taken += len(piece)
        except (TimeoutError, HTTPError):
            self._done = False
        self._pending.clear()

    async def read(self, limit: int = MAX_BODY) -> bytes:
        """The whole body; HTTPError when it is longer than `limit` bytes."""
        parts = [bytes(self._pending)]
        size = len(self._pending)
        self._pending.clear()
        while piece := await self._more():
            size += len(piece)
            if size > limit:
                raise HTTPError(f"the answer is longer than {limit} bytes")
            parts.append(piece)
        return b"".join(parts)

    async def excerpt(self, limit: int) -> bytes:
        """At most `limit` bytes of the body, as many as come before its end, a cut or a
        silence: enough to explain an error status, which stands whatever the body does."""
        data = bytearray(self._pending)
        self._pending.clear()
        with contextlib.suppress(TimeoutError, HTTPError):  # not `complete`: never reused
            while len(data) < limit and (piece := await self._more()):
                data += piece
        return bytes(data[:limit])

    async def readline(self, limit: int) -> bytes:
        """The next line with its b"\\n" (the last may lack it); b"" at the end of the body."""
        scanned = 0
        while (end := self._pending.find(b"\n", scanned)) < 0:
            if len(self._pending) > limit:
                raise HTTPError(f"a line of the answer is longer than {limit} bytes")
            scanned = len(self._pending)
            piece = await self._more()
            if not piece:
                line = bytes(self._pending)
                self._pending.clear()
                return line
            self._pending += piece
        line = bytes(self._pending[: end + 1])
        del self._pending[: end + 1]
        return line

    async def _more(self) -> bytes:
        """The next piece of the body as sent (chunk framing removed); b"" at its end."""
        if self._done:
            return b""
        reader = self._conn.reader
        if self._mode == "eof":
            data = await _timed(reader.read(_READ), self._read_s)
            self._done = not data
            return data
        if self._mode == "chunked" and not self._left:
            line = await _timed(reader.readuntil(b"\n"), self._read_s)
            size = line.split(b";", 1)[0].strip()
            # Hex digits only: int() takes "-5" (a negative read reads to the end) and "0x5".
            if not size or len(size) > 15 or size.strip(b"0123456789abcdefABCDEF"):
                raise HTTPError(f"bad chunk size: {line[:40]!r}")
            self._left = int(size, 16)
            if not self._left:  # the last chunk: skip any trailers up to the blank line
                while (await _timed(reader.readuntil(b"\n"), self._read_s)).strip():
                    pass
                self._done = True
                return b""
        data = await _timed(reader.read(min(self._left, _READ)), self._read_s)
        if not data:
            raise HTTPError("the connection closed in the middle of the answer")
        self._left -= len(data)
        if not self._left:
            if self._mode == "length":
                self._done = True
            elif await _timed(reader.readexactly(2), self._read_s) != b"\r\n":
                raise HTTPError("bad chunk framing")
        return data


class Pool:
    """Kept-alive connections per origin, at most `limit` in use at once (for one event loop)."""

    def __init__(self, *, limit: int, connect_s: float, read_s: float) -> None:
        self.connect_s, self.read_s = connect_s, read_s
        self.closed = False
        self.opened = 0  # connections made so far
        self._slots = asyncio.Semaphore(limit)
        self._idle: dict[Key, list[_Connection]] = {}
        self._tls: ssl.SSLContext | None = None
        self._proxies: dict[Origin, Proxy | None] = {}  # read from the environment once

    @asynccontextmanager
    async def post(self, url: str, data: bytes, headers: dict[str, str]) -> AsyncIterator[Response]:
        """POST `data`; the response's body must be read inside the block."""
        origin, target, host = _target(url)
        key = origin, self._proxy(origin, url)
        proxy = key[1]
        if proxy is not None and origin[0] == "http":  # the proxy forwards it: the whole URL
            target = f"http://{host}{target}"
            if proxy.authorization:
                headers = {**headers, "Proxy-Authorization": proxy.authorization}
        head = _head(target, host, len(data), headers)
        await _timed(self._slots.acquire(), self.connect_s)
        conn: _Connection | None = None
        try:
            conn, response = await self._exchange(key, head + data)
            if proxy is not None and response.status == 407:  # only a proxy answers this
                raise HTTPError(_refused(proxy, response.status, response.reason), answered=False)
            yield response
            if response.reusable and not response.complete:
                await response.finish(within=0.25)
            if response.reusable and response.complete and not self.closed:
                conn.idle_since, conn.reused = time.monotonic(), True
                self._idle.setdefault(key, []).append(conn)
                conn = None
        finally:
            if conn is not None:  # unread, broken or cancelled: never reused
                conn.close()
            self._slots.release()

    async def close(self) -> None:
        self.closed = True
        idle = [conn for conns in self._idle.values() for conn in conns]
        self._idle.clear()
        for conn in idle:
            conn.close()
        if idle:  # let the transports finish closing while the loop still runs
            waits = [conn.writer.wait_closed() for conn in idle]
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await asyncio.gather(*waits, return_exceptions=True)

    def _proxy(self, origin: Origin, url: str) -> Proxy | None:
        if origin not in self._proxies:
            proxy = proxy_for(url)
            # One the lean client cannot speak (SOCKS) is routing's to avoid; asked for anyway
            # (llm.transport = direct), it connects directly, as it always did.
            self._proxies[origin] = proxy if proxy is not None and proxy.usable else None
        return self._proxies[origin]

    async def _exchange(self, key: Key, request: bytes) -> tuple[_Connection, Response]:
        """Send the request and read the response's head. A kept-alive connection the server
        closed while it idled fails before any answer: the request goes once more on a new one."""
        while True:
            conn = self._reuse(key) or await self._connect(*key)
            try:
                conn.writer.write(request)
                await _timed(conn.writer.drain(), self.read_s)
                return conn, await self._response(conn)
            except HTTPError as exc:
                conn.close()
                if exc.answered or not conn.reused:
                    raise
                # The server had closed this kept-alive connection: once more, on another.
            except BaseException:
                conn.close()
                raise

    def _reuse(self, key: Key) -> _Connection | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()  # the most recently used is the least likely to be stale
            if conn.usable():
                return conn
            conn.close()
        return None

    async def _connect(self, origin: Origin, proxy: Proxy | None) -> _Connection:
        scheme, host, port = origin
        if proxy is None:
            return await self._open(host, port, tls=scheme == "https", name=f"{host}:{port}")
        name = f"the proxy at {proxy.address}"  # never its credentials
        conn = await self._open(proxy.host, proxy.port, tls=proxy.scheme == "https", name=name)
        if scheme == "https":
            try:
                await self._tunnel(conn, origin, proxy)
            except BaseException:
                conn.close()
                raise
        return conn

    async def _open(self, host: str, port: int, *, tls: bool, name: str) -> _Connection:
        context = await self._tls_context() if tls else None
        try:
            async with asyncio.timeout(self.connect_s):
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=context, limit=_MAX_HEAD, happy_eyeballs_delay=0.25
                )
        except TimeoutError:
            raise
        except (OSError, UnicodeError) as exc:  # refused, unresolvable (not even a name: idna
            # refuses it), TLS refused or unverifiable
            raise HTTPError(f"cannot connect to {name}: {exc}", answered=False) from None
        self.opened += 1
        return _Connection(reader, writer)

    async def _tunnel(self, conn: _Connection, origin: Origin, proxy: Proxy) -> None:
        """CONNECT through `proxy` to `origin`, then TLS to the target (its certificate and
        name verified) inside the tunnel; each step bounded by the connect timeout."""
        _, host, port = origin
        authority = f"{_named(host)}:{port}"
        lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}", "User-Agent: nanomem"]
        if proxy.authorization:
            lines.append(f"Proxy-Authorization: {proxy.authorization}")
        try:
            conn.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("ascii"))
            await _timed(conn.writer.drain(), self.connect_s)
            status = 100
            while 100 <= status < 200:  # 1xx: informational, the real answer follows
                raw = await _timed(conn.reader.readuntil(b"\r\n\r\n"), self.connect_s)
                status, _ = _parse_head(raw)
        except HTTPError as exc:
            raise HTTPError(f"the proxy at {proxy.address}: {exc}", answered=False) from None
        if not 200 <= status < 300:
            raise HTTPError(_refused(proxy, status, _reason(raw), authority), answered=False)
        context = await self._tls_context()
        # Bytes after the answer came before TLS: read later as the target's reply, they would
        # let the proxy forge one past the verified certificate. (No public way to peek; from
        # here to start_tls nothing yields, so nothing more can arrive unchecked.)
        if getattr(conn.reader, "_buffer", b""):
            raise HTTPError(
                f"the proxy at {proxy.address} sent data before the tunnel's TLS began",
                answered=False,
            )
        try:
            async with asyncio.timeout(self.connect_s):
                await conn.writer.start_tls(context, server_hostname=host)
        except TimeoutError:
            raise
        except (OSError, UnicodeError) as exc:  # TLS refused or the certificate unverifiable
            through = f"through the proxy at {proxy.address}"
            raise HTTPError(f"cannot connect to {authority} {through}: {exc}") from None

    async def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            # Reading the system's certificates is blocking file I/O: not on the event loop.
            self._tls = await asyncio.to_thread(_tls_context)
        return self._tls

    async def _response(self, conn: _Connection) -> Response:
        while True:
            raw = await _timed(conn.reader.readuntil(b"\r\n\r\n"), self.read_s)
            status, headers = _parse_head(raw)
            if not (100 <= status < 200) or status == 101:
                return Response(conn, status, headers, self.read_s, _reason(raw))
            # 1xx (100 Continue, 103 Early Hints): the real answer follows.


async def _timed(step: Awaitable[T], seconds: float) -> T:
    """One step of the exchange, bounded; stream and protocol failures become HTTPError."""
    try:
        async with asyncio.timeout(seconds):
            return await step
    except TimeoutError:  # an OSError too: kept apart, it is a category of its own
        raise
    except asyncio.IncompleteReadError as exc:
        closed = "the server closed the connection"
        raise HTTPError(closed, answered=bool(exc.partial)) from None
    except asyncio.LimitOverrunError:
        raise HTTPError("a header or chunk line is too long") from None
    except ConnectionError as exc:  # reset, aborted, broken pipe: nothing more came
        raise HTTPError(f"the connection broke: {exc}", answered=False) from None
    except OSError as exc:  # TLS errors mid-stream among them
        raise HTTPError(f"the connection failed: {exc}") from None


def _target(url: str) -> tuple[Origin, str, str]:
    """(origin, request target, Host header) of an http(s) URL."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise HTTPError(f"bad URL: {exc}") from None
    host = parts.hostname
    if parts.scheme not in ("http", "https") or not host:
        raise HTTPError(f"bad URL {url!r}: http:// or https:// with a host is needed")
    default = 443 if parts.scheme == "https" else 80
    port = port or default
    try:  # the request line and Host are ASCII: a space or a non-ASCII letter is encoded
        named = _named(host)
    except UnicodeError as exc:
        raise HTTPError(f"bad URL {url!r}: {exc}") from None
    host_header = named if port == default else f"{named}:{port}"
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    target = quote(target, safe="/%?=&;:@!$'()*+,~")
    return (parts.scheme, host, port), target, host_header


def _named(host: str) -> str:
    """The host as a request line or Host header holds it (ASCII; IPv6 in brackets)."""
    return f"[{host}]" if ":" in host else host.encode("idna").decode("ascii")


def _refused(proxy: Proxy, status: int, reason: str, target: str = "") -> str:
    tunnel = f" the tunnel to {target}" if target else ""
    hint = " (check the user and password in the proxy URL)" if status == 407 else ""
    return f"the proxy at {proxy.address} refused{tunnel}: {status} {reason}".rstrip() + hint


def _head(target: str, host: str, length: int, headers: dict[str, str]) -> bytes:
    lines = [
        f"POST {target} HTTP/1.1",
        f"Host: {host}",
        "User-Agent: nanomem",
        "Accept: */*",
        "Accept-Encoding: identity",
        f"Content-Length: {length}",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    text = "\r\n".join(lines) + "\r\n\r\n"
    if any(c in value for value in headers.values() for c in "\r\n"):
        raise HeaderError("a header value holds a line break")  # never a second request
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        raise HeaderError("a header value is not Latin-1 text (check the API key)") from None


def _parse_head(raw: bytes) -> tuple[int, dict[str, str]]:
    lines = raw.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    try:
        status = int(rest[:3])
    except ValueError:
        status = 0
    if not version.startswith("HTTP/1.") or not 100 <= status <= 599:
        raise HTTPError(f"not an HTTP/1.x answer: {lines[0][:60]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, colon, value = line.partition(":")
        if not colon:
            raise HTTPError(f"malformed header line: {line[:60]!r}")
        name, value = name.strip().lower(), value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    if "close" in headers.get("connection", "").lower() or version == "HTTP/1.0":
        headers["connection"] = "close"  # an HTTP/1.0 answer is never kept alive
    return status, headers


def _reason(raw: bytes) -> str:
    """The reason phrase of a status line ("Proxy Authentication Required"), trimmed."""
    line = raw.split(b"\r\n", 1)[0].decode("latin-1")
    return " ".join(line.split(" ", 2)[2:])[:80]


def _tls_context() -> ssl.SSLContext:
    import ssl

    context = ssl.create_default_context()  # the system's certificates, hostnames checked
    context.set_alpn_protocols(["http/1.1"])
    return context
