"""What the provider tests send, providers of either transport for the loopback fake, a raw
HTTP/1.1 server that answers each request with chosen bytes, and the lean client's pooled
connection to it."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from pydantic import SecretStr

from nanomem.config import LLMSettings
from nanomem.providers.connection import Connection
from nanomem.providers.litellm_provider import LiteLLMProvider
from nanomem.providers.openai_http import OpenAIHTTPProvider
from nanomem.providers.provider import Provider
from tests.conftest import TEST_KEY

USER = [{"role": "user", "content": "hi"}]
Answer = Callable[[int], bytes]  # the raw answer to the n-th request on one connection


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@asynccontextmanager
async def transports(
    transport: str, base_url: str, **llm: Any
) -> AsyncIterator[Callable[[], Provider]]:
    """Makes providers of one transport ("direct", the lean client; or "litellm") for the
    fake model at `base_url`, with `llm` over the test settings; the lean client's sessions
    are closed after."""
    made: list[OpenAIHTTPProvider] = []
    settings = LLMSettings(
        **{
            "model": "openai/fake",
            "api_base": base_url,
            "api_key": SecretStr(TEST_KEY),
            "timeout_s": 10,
            "transport": transport,
            **llm,
        }
    )

    def build() -> Provider:
        if transport == "litellm":
            return LiteLLMProvider(settings)
        made.append(OpenAIHTTPProvider(settings))
        return made[-1]

    try:
        yield build
    finally:
        for provider in made:
            await provider.close()


@asynccontextmanager
async def raw_server(
    answer: Answer,
    *,
    close_after: bool = False,
    tls: ssl.SSLContext | None = None,
    heads: list[bytes] | None = None,
) -> AsyncIterator[str]:
    """A server that answers each request with raw bytes; `close_after` drops the connection
    after each answer without saying so (as servers do with idle kept-alive connections);
    `heads` collects each request's line and headers."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served = 0
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                if heads is not None:
                    heads.append(head)
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                if not (raw := answer(served)):
                    break  # closed as the request came: no answer at all
                writer.write(raw)
                await writer.drain()
                served += 1
                if close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    scheme = "https" if tls else "http"
    try:
        yield f"{scheme}://127.0.0.1:{port}/v1/chat/completions"
    finally:
        server.close()


def ok(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


@asynccontextmanager
async def connected(url: str, timeout_s: float = 10) -> AsyncIterator[Connection]:
    """The lean client's pooled connection for requests to `url`, closed afterwards."""
    made = Connection(url, timeout_s=timeout_s, connections=8)
    try:
        yield made
    finally:
        await made.close()


async def fetch(connection: Connection) -> tuple[int, bytes]:
    """One POST; the status and the whole body."""
    async with connection.post(b'{"x": 1}', {b"Content-Type": b"application/json"}) as resp:
        return resp.status, await resp.read()
