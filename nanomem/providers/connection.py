"""The lean client's connection to one base URL: pooled httpcore connections (kept alive, TLS
verified against the system's certificates, the proxy proxies.py decides on, http://, https://
or SOCKS5), and its body read within limits.

httpcore is used without httpx: httpx's request and response layers (URL and header models,
cookies, its exception classes, urllib.request and http.cookiejar in its import) cost a
one-shot ~60 ms of CPU and 2 MiB, and did nothing the lean client needs (issue 30 #7).
httpcore and anyio cost ~0.06 s of CPU to import: `load()` does it when the lean client
is made (never when this module is imported), so no call waits for it. Timeouts bound
connecting (waiting for a free connection included) and each read or write: a reply may stream
for as long as the server keeps sending. Failures of the connection or the protocol raise
ConnectionFailed with a message that names hosts, never credentials; a timeout raises
TimeoutError.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import sys
import threading
import zlib
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import SplitResult, urlsplit

from nanomem.providers.proxies import Proxy, proxy_for

if TYPE_CHECKING:
    import ssl

    import httpcore

IDLE_S = 15.0  # an idle connection older than this is closed, not reused (aiohttp's default)
MAX_BODY = 64 * 2**20  # a body read whole: past this a broken or hostile server is refused
_FINISH = 64 * 1024  # what is left after a stream's last event, read to keep the connection
SHARD = 1  # connections in one httpcore pool: one; Connection picks the pool (see there)
_PIECE = 256 * 1024  # a compressed body is decoded this much at a time, at most
# Sent before the caller's headers (after Host; Content-Length goes last), in the order
# httpx's client sent them.
_HEADERS = (
    (b"Accept", b"*/*"),
    (b"Connection", b"keep-alive"),
    (b"User-Agent", b"nanomem"),
    (b"Accept-Encoding", b"identity"),
)

_tls: dict[tuple[str, str], ssl.SSLContext] = {}  # by (SSL_CERT_FILE, SSL_CERT_DIR)
_lock = threading.Lock()


class ConnectionFailed(Exception):
    """The connection failed or the server broke HTTP; the message is safe to show."""

    def __init__(self, message: str, *, answered: bool = True) -> None:
        super().__init__(message)
        self.answered = answered  # False: not one byte of an answer had come


def load(url: str) -> None:
    """Import httpcore (and, for an https:// URL, read the system's certificates) now, so that
    the first call does not: `nanomem chat` builds the lean client while its prompt waits.
    (In a thread beside a one-shot's startup it saved nothing: both hold the GIL.)"""
    import anyio._backends._asyncio  # noqa: F401  (what httpcore needs at the first request)

    # httpcore's __init__ imports its HTTP/2 classes (h2, hpack, hyperframe: ~10 ms of CPU),
    # used only when HTTP/2 is asked for, which nanomem never does; kept out of that import
    # only, they load when first asked for (PTB's http_version="2", LITELLM_HTTP2).
    sys.modules.setdefault("h2", None)  # type: ignore[arg-type]
    import httpcore  # noqa: F401

    if sys.modules.get("h2", ...) is None:
        del sys.modules["h2"]
    if url.startswith("https:"):
        tls_context()


def tls_context() -> ssl.SSLContext:
    """The system's certificates, hostnames checked: made once (reading the certificates takes
    ~15 ms), again only when SSL_CERT_FILE or SSL_CERT_DIR changes."""
    key = os.environ.get("SSL_CERT_FILE", ""), os.environ.get("SSL_CERT_DIR", "")
    with _lock:
        if key not in _tls:
            import ssl

            _tls[key] = ssl.create_default_context()
        return _tls[key]


def _trusting_nothing() -> ssl.SSLContext:
    import ssl

    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies, against no certificate at all


class Body:
    """An answer's status and headers, and its body read whole, in part or line by line."""

    def __init__(self, response: httpcore.Response, where: Connection) -> None:
        self.status, self.headers = response.status, _headers(response.headers)
        self.reason = bytes(response.extensions.get("reason_phrase", b"")).decode("latin-1")
        # The pool's stream as it comes, unless the server compressed the body although asked
        # not to: gzip and deflate are decoded then (as httpx did; any other coding as it is).
        stream = cast("AsyncIterable[bytes]", response.stream)  # the async pool's
        coding = self.headers.get("content-encoding", "identity").strip().lower()
        self._chunks = aiter(_decoded(stream, coding) if coding in _CODINGS else stream)
        self._pending = bytearray()
        self._where = where
        self.complete = False

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";", 1)[0].strip().lower()

    async def read(self, limit: int = MAX_BODY) -> bytes:
        """The whole body; ConnectionFailed when it is longer than `limit` bytes."""
        parts = [bytes(self._pending)]
        size = len(self._pending)
        self._pending.clear()
        while piece := await self._more():
            size += len(piece)
            if size > limit:
                raise ConnectionFailed(f"the answer is longer than {limit} bytes")
            parts.append(piece)
        return b"".join(parts)

    async def excerpt(self, limit: int) -> bytes:
        """At most `limit` bytes of the body, as many as come before its end, a cut or a
        silence: enough to explain an error status, which stands whatever the body does."""
        data = bytearray(self._pending)
        self._pending.clear()
        with contextlib.suppress(TimeoutError, ConnectionFailed):
            while len(data) < limit and (piece := await self._more()):
                data += piece
        return bytes(data[:limit])

    async def readline(self, limit: int) -> bytes:
        """The next line with its b"\\n" (the last may lack it); b"" at the end of the body."""
        scanned = 0
        while (end := self._pending.find(b"\n", scanned)) < 0:
            if len(self._pending) > limit:
                raise ConnectionFailed(f"a line of the answer is longer than {limit} bytes")
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

    async def finish(self, within: float) -> None:
        """Read what is left of a small body on its way (the end of a stream after its last
        event), so the connection is kept for the next call; give up quietly otherwise."""
        taken = len(self._pending)
        with contextlib.suppress(TimeoutError, ConnectionFailed):
            async with asyncio.timeout(within):
                while taken <= _FINISH and (piece := await self._more()):
                    taken += len(piece)
        self._pending.clear()

    async def _more(self) -> bytes:
        if self.complete:
            return b""
        with self._where.translated(answered=True):
            async for piece in self._chunks:
                if piece:
                    return piece
        self.complete = True
        return b""


class Connection:
    """Kept-alive connections for requests to one URL, in the event loop it is used in."""

    def __init__(
        self, url: str, *, timeout_s: float, connections: int, configured: str | None = None
    ) -> None:

        self.url = url
        parts = urlsplit(url)
        # Parsed once (~20 us a call otherwise); a URL that cannot be used fails each call.
        self._target: httpcore.URL | None = None
        self._host = b""  # the Host header
        self._bad = "bad URL: it names no host"
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            if parts.hostname:
                self._target, self._host = _target(parts)
                self._bad = ""
        except (ValueError, UnicodeError) as exc:
            port, self._bad = 0, f"bad URL: {exc}"
        self.origin = f"{parts.hostname}:{port}"
        # The one decision routing.py explains too (llm.proxy, else the environment), made once.
        found = proxy_for(url, configured)
        self.proxy = found if found is not None and found.usable else None
        self.opened = 0  # connections made so far
        self.closed = False
        https = parts.scheme == "https" or (self.proxy is not None and self.proxy.scheme == "https")
        # Without TLS on the way (no redirect is followed), the system's certificates are not
        # read: a context that trusts nothing costs ~0.1 ms, not ~20.
        tls = tls_context() if https else _trusting_nothing()
        # httpcore 1.0.9's pool looks at each of its connections (polling the idle ones' sockets)
        # and, for each idle one, counts all of them again, on every request's arrival and end:
        # 100 chats at once on one pool cost ~30 ms of CPU a turn (bench_concurrency: 3.6 s, not
        # 0.65). Pools of at most SHARD connections keep that scan short (CPU per call with 100
        # at once, measured through httpx's AsyncClient: 16 → 2.7 ms, 8 → 1.6, 4 → 1.3, 2 → 0.9;
        # through its transport: 4 → 0.68-0.70, 1 → 0.50-0.52); a new pool is opened only when
        # every pool has SHARD requests in flight, so calls one after another reuse one
        # connection. No redirect is followed (a 3xx is an error: following it could carry the
        # key away), no cookie is kept, and the headers are ours.
        self._make = functools.partial(_pool, tls, self.proxy)
        # connect (waiting for a free connection included), each read and write
        timeouts = ("connect", "read", "write", "pool")
        self._extensions = {"timeout": dict.fromkeys(timeouts, timeout_s)}
        self._pools: list[_Pool] = []
        self._most = max(1, -(-connections // SHARD))  # pools, for `connections` in all

    def post(self, data: bytes, headers: dict[bytes, bytes]) -> AbstractAsyncContextManager[Body]:
        """POST `data`; the body must be read inside the block. A kept-alive connection the
        server closed just as the request went fails before any answer: it goes once more."""
        return self._send(b"POST", data, headers)

    def get(self, headers: dict[bytes, bytes] | None = None) -> AbstractAsyncContextManager[Body]:
        """GET the URL (`nanomem doctor`: Telegram's getMe, Discord's users/@me with its bot
        token in `headers`, a homeserver's whoami with its access token, a gateway's /health)."""
        return self._send(b"GET", b"", headers or {})

    @asynccontextmanager
    async def _send(
        self, method: bytes, data: bytes, headers: dict[bytes, bytes]
    ) -> AsyncIterator[Body]:
        import httpcore

        if self._target is None:
            raise ConnectionFailed(self._bad, answered=False)
        pool = self._pool()
        pool.busy += 1
        sent = [(b"Host", self._host), *_HEADERS, *headers.items()]
        if method != b"GET":
            sent.append((b"Content-Length", b"%d" % len(data)))
        try:
            for attempt in (1, 2):
                trace = _Trace(self)
                with self.translated(answered=False, trace=trace):
                    request = httpcore.Request(
                        method,
                        self._target,
                        headers=sent,
                        content=data,
                        extensions={**self._extensions, "trace": trace},
                    )
                    try:
                        response = await pool.connections.handle_async_request(request)
                    except httpcore.RemoteProtocolError:
                        if attempt == 1 and not trace.opened:  # a reused connection: again
                            continue
                        raise
                    break
        except BaseException:
            pool.busy -= 1
            raise
        try:
            body = Body(response, self)
            if self.proxy is not None and body.status == 407:  # only a proxy says so
                reason = f"{body.status} {body.reason}"
                raise ConnectionFailed(_refused(self.proxy, reason), answered=False)
            yield body
            if not body.complete:
                await body.finish(within=0.25)
        finally:
            # A body read to its end leaves its connection for the next call; any other
            # (unread, broken, cancelled) closes it.
            pool.busy -= 1
            with contextlib.suppress(Exception):
                await response.aclose()

    async def close(self) -> None:
        self.closed = True
        pools, self._pools = self._pools, []
        for pool in pools:
            await pool.connections.aclose()

    def _pool(self) -> _Pool:
        """The pool with the fewest requests in flight (the first of equals); a new one when
        all have SHARD and there may be more."""
        least = min(self._pools, key=lambda pool: pool.busy, default=None)
        if least is None or (least.busy >= SHARD and len(self._pools) < self._most):
            least = _Pool(self._make())
            self._pools.append(least)
        return least

    @contextlib.contextmanager
    def translated(self, *, answered: bool, trace: _Trace | None = None) -> Iterator[None]:
        """httpcore's exceptions as TimeoutError or ConnectionFailed, named without secrets."""
        import httpcore

        try:
            yield
        except httpcore.TimeoutException:
            raise TimeoutError from None
        except httpcore.UnsupportedProtocol as exc:
            raise ConnectionFailed(f"bad URL: {exc}", answered=False) from None
        except httpcore.ProxyError as exc:
            assert self.proxy is not None
            tunnel = self.origin if self.proxy.scheme in ("http", "https") else ""
            raise ConnectionFailed(_refused(self.proxy, str(exc), tunnel), answered=False) from None
        except httpcore.ConnectError as exc:
            failed = trace.failed if trace is not None else ""
            raise ConnectionFailed(self._unreachable(failed, exc), answered=False) from None
        except httpcore.RemoteProtocolError as exc:
            closed = "the server closed the connection" if "disconnected" in str(exc) else ""
            message = f"{closed or type(exc).__name__}: {exc}"
            raise ConnectionFailed(message, answered=answered) from None
        # The connection broke, or the answer was not HTTP.
        except (httpcore.NetworkError, httpcore.ProtocolError) as exc:
            raise ConnectionFailed(f"{type(exc).__name__}: {exc}", answered=answered) from None

    def _unreachable(self, failed: str, exc: Exception) -> str:
        if self.proxy is None:
            return f"cannot connect to {self.origin}: {exc}"
        through = f"through the proxy at {self.proxy.address}"
        # connect_tcp (and an https:// proxy's own TLS) are the proxy's; TLS to the target
        # inside the tunnel (proxy.start_tls, socks.start_tls) is the target's.
        if failed.startswith("connection.") or failed == "socks.connect_tcp.failed":
            return f"cannot connect to the proxy at {self.proxy.address}: {exc}"
        return f"cannot connect to {self.origin} {through}: {exc}"


def _pool(tls: ssl.SSLContext, proxy: Proxy | None) -> httpcore.AsyncConnectionPool:
    """An httpcore pool (direct, through an HTTP proxy or SOCKS5, as httpx's transport made
    them), its connections made by network.py's backend on asyncio (a third less CPU a call
    than httpcore's default, anyio)."""
    import httpcore

    from nanomem.providers.network import Backend

    options: dict[str, Any] = {
        "ssl_context": tls,
        "max_connections": SHARD,
        "max_keepalive_connections": SHARD,
        "keepalive_expiry": IDLE_S,
        "network_backend": Backend(),
    }
    if proxy is None:
        return httpcore.AsyncConnectionPool(**options)
    url = httpcore.URL(scheme=proxy.scheme, host=proxy.host, port=proxy.port, target="/")
    auth = None
    if proxy.credentials is not None:
        auth = proxy.credentials[0].encode(), proxy.credentials[1].encode()
    if proxy.scheme in ("http", "https"):
        own = tls if proxy.scheme == "https" else None  # TLS to the proxy itself
        return httpcore.AsyncHTTPProxy(url, auth, proxy_ssl_context=own, **options)
    return httpcore.AsyncSOCKSProxy(url, auth, **options)


def _target(parts: SplitResult) -> tuple[httpcore.URL, bytes]:
    """The URL httpcore asks for and the Host header: a name's non-ASCII letters as IDNA."""
    import httpcore

    name = parts.hostname or ""
    host = name.encode("ascii") if name.isascii() else name.encode("idna")
    shown = b"[%s]" % host if b":" in host else host
    port = None if parts.port == {"http": 80, "https": 443}.get(parts.scheme) else parts.port
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    target = httpcore.URL(scheme=parts.scheme, host=host, port=port, target=path)
    return target, shown if port is None else b"%s:%d" % (shown, port)


def _headers(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """An answer's headers by lowercase name; a name given twice, its values joined."""
    found: dict[str, str] = {}
    for name, value in raw:
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        found[key] = f"{found[key]}, {text}" if key in found else text
    return found


_CODINGS = ("gzip", "x-gzip", "deflate")


async def _decoded(stream: AsyncIterable[bytes], coding: str) -> AsyncIterator[bytes]:
    """A gzip or deflate body decoded as it comes, never more than _PIECE bytes at a time (a
    small body may unpack to gigabytes: the reader's limit stops it)."""
    wbits = zlib.MAX_WBITS | 16 if "gzip" in coding else zlib.MAX_WBITS
    decoder = zlib.decompressobj(wbits)
    try:
        async for piece in stream:
            data = piece
            while data:
                out = decoder.decompress(data, _PIECE)
                data = decoder.unconsumed_tail
                if out:
                    yield out
        if rest := decoder.flush():
            yield rest
    except zlib.error as exc:
        raise ConnectionFailed(f"the answer's {coding} body is broken: {exc}") from None


@dataclass
class _Pool:
    connections: httpcore.AsyncConnectionPool
    busy: int = 0  # requests in flight


class _Trace:
    """httpcore's trace hook for one request: whether it opened a connection, where it failed."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.opened = False
        self.failed = ""

    async def __call__(self, event: str, info: dict[str, Any]) -> None:
        if event.endswith("connect_tcp.complete"):
            self.opened = True
            self.connection.opened += 1
        elif event.endswith(".failed") and not self.failed:
            self.failed = event


def _refused(proxy: Proxy, answer: str, target: str = "") -> str:
    tunnel = f" the tunnel to {target}" if target else ""
    wrong = "407" in answer or "username/password" in answer.lower()
    hint = " (check the user and password in the proxy URL)" if wrong else ""
    return f"the proxy at {proxy.address} refused{tunnel}: {answer}".rstrip() + hint
