"""One HTTP client for the web tools: every hop guarded, bytes and time capped, nothing kept.

aiohttp (already a dependency) rather than httpx: its resolver is a port we can fill
(`GuardedResolver`), so the address checked is the address connected to. Proxies from the
environment are not used (`trust_env=False`): a proxy would connect on our behalf to addresses
the guard never saw. No cookies are stored between requests (a jar that keeps nothing).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nanomem.features.web.guard import AddressGuard, Refused
from nanomem.text.inflate import BrokenEncoding, Inflate, UnknownEncoding

if TYPE_CHECKING:
    from aiohttp.abc import AbstractResolver

REDIRECTS = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "Mozilla/5.0 (compatible; nanomem; +https://github.com/nanomem)"
CHUNK = 64 * 1024


class WebError(Exception):
    """A request that failed; the message is short and meant for the model as is."""


NOT_WEB = "only http:// and https:// addresses are fetched"  # then ", not <the address>"


@dataclass(frozen=True)
class Page:
    url: str  # after redirects
    status: int
    content_type: str  # the media type alone, lower case ("text/html")
    charset: str | None
    body: bytes
    cut: bool  # stopped at max_bytes
    length: int | None  # what Content-Length announced

    def text(self) -> str:
        try:
            return self.body.decode(self.charset or "utf-8", errors="replace")
        except LookupError:  # a charset Python does not know
            return self.body.decode("utf-8", errors="replace")


class WebClient:
    def __init__(
        self,
        guard: AddressGuard,
        *,
        max_bytes: int,
        max_redirects: int,
        timeout_s: float,
        resolver: AbstractResolver | None = None,
    ) -> None:
        self.guard = guard
        self.max_bytes, self.max_redirects, self.timeout_s = max_bytes, max_redirects, timeout_s
        self.resolver = resolver  # the name service under the guard (a test's fake DNS)

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        json: Any = None,
        data: dict[str, str] | None = None,
        follow: bool = True,
    ) -> Page:
        """The answer at `url`, following redirects (each hop guarded) when `follow`."""
        import aiohttp  # lazily: `nanomem chat -m` never pays for the web client it may not use

        from nanomem.features.web.resolver import GuardedResolver

        connector = aiohttp.TCPConnector(
            resolver=GuardedResolver(self.guard, self.resolver), use_dns_cache=False
        )
        session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
            auto_decompress=False,  # decompressed here, within max_bytes (no zip bombs)
            timeout=aiohttp.ClientTimeout(total=None),  # asyncio.timeout below covers it all
            headers={"User-Agent": USER_AGENT, "Accept-Encoding": "gzip, deflate"},
        )
        try:
            async with session, asyncio.timeout(self.timeout_s):
                return await self._follow(session, method, url, headers, json, data, follow)
        except TimeoutError:
            raise WebError(f"no complete answer within {self.timeout_s:g} s") from None
        except Refused as exc:
            raise WebError(f"refused: {exc}") from None
        except aiohttp.InvalidURL:
            raise WebError(f"not a usable URL: {url}") from None
        except aiohttp.ClientResponseError as exc:
            raise WebError(f"the server sent a broken answer ({exc.status})") from None
        except (aiohttp.ClientError, OSError) as exc:
            raise WebError(f"could not connect: {_reason(exc)}") from None

    async def _follow(
        self,
        session: Any,
        method: str,
        url: str,
        headers: dict[str, str] | None,
        json: Any,
        data: dict[str, str] | None,
        follow: bool,
    ) -> Page:
        from yarl import URL

        target = URL(url)
        for _hop in range(self.max_redirects + 1):
            if target.scheme not in ("http", "https") or not target.host:
                raise WebError(f"{NOT_WEB}, not {target}")
            self.guard.check_host(target.host)
            async with session.request(
                method, target, headers=headers, json=json, data=data, allow_redirects=False
            ) as response:
                location = response.headers.get("Location")
                if follow and response.status in REDIRECTS and location:
                    target = target.join(URL(location))
                    if response.status == 303 or (
                        response.status in (301, 302) and method != "GET"
                    ):
                        method, json, data = "GET", None, None
                    continue
                return await self._read(response, str(target))
        raise WebError(f"more than {self.max_redirects} redirects (tools.web.max_redirects)")

    async def _read(self, response: Any, url: str) -> Page:
        try:
            inflate = Inflate(response.headers.get("Content-Encoding", ""))
        except UnknownEncoding as exc:
            raise WebError(f"the server sent an encoding nanomem does not read ({exc})") from None
        body, cut = bytearray(), False
        async for chunk in response.content.iter_chunked(CHUNK):
            room = self.max_bytes - len(body)
            try:  # at most room+1 bytes out of each chunk: a bomb never inflates in memory
                piece = inflate.take(chunk, room)
            except BrokenEncoding:
                raise WebError("the page's compression is broken") from None
            body += piece[:room]
            if len(piece) > room:
                cut = True
                break
        return Page(
            url=url,
            status=response.status,
            content_type=(response.content_type or "").lower(),
            charset=response.charset,
            body=bytes(body),
            cut=cut,
            length=response.content_length,
        )


def _reason(exc: BaseException) -> str:
    """The cause in a few words, without the request (a URL may carry a key in its query)."""
    cause = getattr(exc, "os_error", None) or exc
    text = getattr(cause, "strerror", None) or type(cause).__name__
    host = getattr(exc, "host", None)
    return f"{host}: {text}" if host else str(text)
