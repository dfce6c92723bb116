"""The lean client's connection (httpcore): kept-alive connections, framing, limits, TLS, broken
servers, each reaching the provider as one of its error categories."""

from __future__ import annotations

import asyncio
import gzip
import shutil
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from nanomem.config import LLMSettings
from nanomem.providers.connection import ConnectionFailed
from nanomem.providers.openai_http import OpenAIHTTPProvider
from nanomem.providers.provider import ProviderError
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import until
from tests.helpers.http import USER, connected, fetch, ok, raw_server


async def test_calls_reuse_one_kept_alive_connection() -> None:
    with FakeOpenAI() as srv:
        async with connected(f"{srv.base_url}/chat/completions") as pool:
            for _ in range(3):
                status, body = await fetch(pool)
                assert status == 200 and b"echo:" in body
    assert pool.opened == 1


async def test_a_streamed_reply_read_to_its_last_event_keeps_the_connection() -> None:
    with FakeOpenAI() as srv:
        llm = LLMSettings(model="openai/fake", api_base=srv.base_url, timeout_s=10)
        provider = OpenAIHTTPProvider(llm)
        for _ in range(3):
            reply = await provider.complete(USER, on_text=lambda piece: asyncio.sleep(0))
            assert reply.content and srv.requests[-1]["stream"] is True
        assert provider._session is not None and provider._session.opened == 1
        await provider.close()


async def test_a_stream_cancelled_midway_leaves_no_half_read_connection_behind() -> None:
    with FakeOpenAI() as srv:
        srv.reply("first part, second part", pieces=2, hold_after=2)
        srv.reply("whole")
        llm = LLMSettings(model="openai/fake", api_base=srv.base_url, timeout_s=10)
        provider = OpenAIHTTPProvider(llm)
        shown = asyncio.Event()

        async def on_text(piece: str) -> None:
            shown.set()

        task = asyncio.create_task(provider.complete(USER, on_text=on_text))
        await asyncio.wait_for(shown.wait(), 30)  # a safety net
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        srv.release()
        reply = await provider.complete(USER, on_text=on_text)
        assert reply.content == "whole"  # not the rest of the cancelled stream
        assert provider._session is not None and provider._session.opened == 2
        await provider.close()


async def test_a_connection_the_server_closed_while_idle_is_replaced() -> None:
    # Whether its close has arrived (the pool drops it) or not (the request fails on it before
    # any answer and goes again), the second call gets its answer on a new connection.
    async with raw_server(lambda n: ok(b"fine"), close_after=True) as url, connected(url) as pool:
        assert await fetch(pool) == (200, b"fine")
        assert await fetch(pool) == (200, b"fine")
    assert pool.opened == 2


async def test_a_request_on_a_connection_closing_just_then_goes_again() -> None:
    # The server drops the kept-alive connection as the second request arrives on it.
    answer = lambda n: ok(b"fine") if n == 0 else b""  # noqa: E731
    async with raw_server(answer) as url, connected(url) as pool:
        assert await fetch(pool) == (200, b"fine")
        assert await fetch(pool) == (200, b"fine")
    assert pool.opened == 2


async def test_a_new_connection_closed_without_an_answer_is_an_error() -> None:
    async with raw_server(lambda n: b"") as url, connected(url) as pool:
        with pytest.raises(ConnectionFailed, match="closed"):
            await fetch(pool)
    assert pool.opened == 1  # a fresh connection is not tried again (RetryingProvider decides)


async def test_chunked_bodies_with_extensions_and_trailers() -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n"
        b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: yes\r\n\r\n"
    )
    async with raw_server(lambda n: chunked) as url, connected(url) as pool:
        async with pool.post(b"{}", {}) as resp:
            assert resp.content_type == "text/event-stream"
            assert await resp.readline(100) == b"hello, world"
            assert await resp.readline(100) == b""
        assert await fetch(pool) == (200, b"hello, world")
    assert pool.opened == 1  # the body was read to its end: the connection was kept


async def test_a_body_without_length_is_read_to_the_end_and_not_reused() -> None:
    answer = lambda n: b"HTTP/1.0 200 OK\r\n\r\nall of it"  # noqa: E731
    async with raw_server(answer, close_after=True) as url, connected(url) as pool:
        assert await fetch(pool) == (200, b"all of it")
        assert await fetch(pool) == (200, b"all of it")
    assert pool.opened == 2


async def test_lines_longer_than_the_limit_are_refused() -> None:
    async with (
        raw_server(lambda n: ok(b"x" * 5000)) as url,
        connected(url) as pool,
        pool.post(b"{}", {}) as resp,
    ):
        with pytest.raises(ConnectionFailed, match="longer than"):
            await resp.readline(1000)


@pytest.mark.parametrize(
    "answer",
    [
        b"SMTP ready\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
    ],
)
async def test_broken_answers_raise_connection_failures(answer: bytes) -> None:
    async with raw_server(lambda n: answer, close_after=True) as url, connected(url) as pool:
        with pytest.raises(ConnectionFailed):
            await fetch(pool)


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: -3\r\n\r\nabc",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n",
    ],
)
async def test_signed_or_prefixed_lengths_are_refused_not_read_to_the_end(answer: bytes) -> None:
    # The server keeps the connection open: a negative read would wait for its end.
    async with raw_server(lambda n: answer) as url, connected(url, timeout_s=60) as pool:
        with pytest.raises(ConnectionFailed):
            await asyncio.wait_for(fetch(pool), 30)  # a safety net


async def test_a_body_longer_than_the_limit_is_refused() -> None:
    async with (
        raw_server(lambda n: ok(b"x" * 5000)) as url,
        connected(url) as pool,
        pool.post(b"{}", {}) as resp,
    ):
        with pytest.raises(ConnectionFailed, match="longer than 1000 bytes"):
            await resp.read(limit=1000)


@asynccontextmanager
async def endless_error_server() -> AsyncIterator[str]:
    """Answers 503 with a chunked body that never ends."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 503 Busy\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n%s\r\n" % (4096, b"overloaded " * 372 + b"....")
        try:
            while True:
                writer.write(chunk)
                await writer.drain()
        except ConnectionError:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    finally:
        server.close()


async def test_an_endless_error_body_is_cut_and_its_status_decides() -> None:
    async with endless_error_server() as base:
        provider = OpenAIHTTPProvider(LLMSettings(model="openai/x", api_base=base, timeout_s=10))
        with pytest.raises(ProviderError) as caught:
            await asyncio.wait_for(provider.complete(USER), 60)  # a safety net
        await provider.close()
    assert caught.value.status == 503 and "overloaded" in str(caught.value)


async def test_an_error_whose_body_is_cut_keeps_its_category() -> None:
    body = b'{"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"'
    head = b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 500\r\n\r\n"
    async with raw_server(lambda n: head + body, close_after=True) as url:
        base = url.removesuffix("/chat/completions")
        provider = OpenAIHTTPProvider(LLMSettings(model="openai/x", api_base=base, timeout_s=10))
        with pytest.raises(ProviderError) as caught:
            await provider.complete(USER)
        await provider.close()
    assert caught.value.category == "auth" and "Incorrect API key" in str(caught.value)


async def test_bad_urls_and_header_values_raise_before_sending() -> None:
    async with connected("ftp://example.com/x") as pool:
        with pytest.raises(ConnectionFailed, match="bad URL"):
            await fetch(pool)
    async with connected(f"http://{'a' * 64}.example.com/x") as pool:
        # Not a name (a label is at most 63 letters): the resolver asks DNS, which says so.
        with pytest.raises(ConnectionFailed, match=r"cannot connect to a{64}\.example\.com:80"):
            await fetch(pool)
    assert pool.opened == 0
    with FakeOpenAI() as srv:
        llm = LLMSettings(model="openai/x", api_base=srv.base_url, api_key="a\r\nX: y")
        provider = OpenAIHTTPProvider(llm)
        with pytest.raises(ProviderError, match="line break"):
            await provider.complete(USER)
        await provider.close()
    assert srv.requests == []


async def test_a_url_that_cannot_be_used_fails_each_call_as_a_bad_url() -> None:
    for url in ("http://127.0.0.1:99999/v1/chat/completions", "http:///v1/chat/completions"):
        async with connected(url) as pool:
            for _ in range(2):
                with pytest.raises(ConnectionFailed, match="bad URL"):
                    await fetch(pool)
        assert pool.opened == 0


async def test_requests_carry_the_same_headers_and_no_cookie_the_server_set() -> None:
    heads: list[bytes] = []
    answer = b"HTTP/1.1 200 OK\r\nSet-Cookie: session=abc\r\nContent-Length: 2\r\n\r\nok"
    async with raw_server(lambda n: answer, heads=heads) as url, connected(url) as pool:
        for _ in range(2):
            assert await fetch(pool) == (200, b"ok")
    names = [[line.split(b":")[0] for line in head.split(b"\r\n")[1:-2]] for head in heads]
    sent = b"Host Accept Connection User-Agent Accept-Encoding Content-Type Content-Length"
    assert names[0] == names[1] == sent.split()
    assert b"identity" in heads[1] and b"nanomem" in heads[1]


async def test_a_body_compressed_although_not_asked_for_is_decoded() -> None:
    packed = gzip.compress(b"all of it")
    answer = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s"
    async with raw_server(lambda n: answer % (len(packed), packed)) as url, connected(url) as pool:
        assert await fetch(pool) == (200, b"all of it")
        assert await fetch(pool) == (200, b"all of it")
    assert pool.opened == 1


@pytest.mark.slow
def test_http2_still_loads_when_asked_for_after_the_lean_client_kept_it_out() -> None:
    # A fresh process: nothing has imported httpx's stack yet, as in `nanomem chat -m`.
    code = (
        "import sys; from nanomem.providers import connection; connection.load('http://x'); "
        "assert 'h2' not in sys.modules; import httpx; httpx.AsyncClient(http2=True); "
        "from httpcore._async.http2 import AsyncHTTP2Connection; print('h2' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout) == (0, "True\n"), done.stderr


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command makes the test certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    command = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    command += ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost"]
    command += ["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"]
    subprocess.run(
        command,
        check=True,
        capture_output=True,
    )
    return cert, key


async def test_tls_is_verified_against_the_systems_certificates(
    certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = certificate
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    async with raw_server(lambda n: ok(b"secret"), tls=server_tls) as url:
        async with connected(url) as unknown:
            with pytest.raises(ConnectionFailed, match="CERTIFICATE_VERIFY_FAILED"):
                await fetch(unknown)
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # now the system trusts it
        async with connected(url) as trusted:
            assert await fetch(trusted) == (200, b"secret")


async def test_a_hundred_calls_at_once_keep_their_connections_for_the_next_hundred() -> None:
    with FakeOpenAI() as srv:
        for _ in range(100):
            srv.reply("held", hold_after=0)
        llm = LLMSettings(model="openai/fake", api_base=srv.base_url, timeout_s=30)
        provider = OpenAIHTTPProvider(llm)
        shown = lambda piece: asyncio.sleep(0)  # noqa: E731  (held: streams only)
        burst = asyncio.gather(*(provider.complete(USER, on_text=shown) for _ in range(100)))
        await until(lambda: srv.held == 100)  # all hundred are in the server at once
        srv.release()
        first = await asyncio.wait_for(burst, 60)  # a safety net
        second = await asyncio.gather(*(provider.complete(USER) for _ in range(100)))
        assert provider._session is not None
        opened = provider._session.opened
        await provider.close()
    assert [r.content for r in first] == ["held"] * 100 and len(second) == 100
    assert opened == 100  # one each at once (over several pools), all kept and reused
