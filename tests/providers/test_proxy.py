"""The lean client through an HTTP(S) proxy: CONNECT tunnels with TLS to the target inside,
absolute-form requests, credentials, refusals, kept-alive connections and NO_PROXY; and through
a SOCKS5 proxy."""

from __future__ import annotations

import asyncio
import base64
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nanomem.config import LLMSettings
from nanomem.providers.connection import ConnectionFailed
from nanomem.providers.openai_http import OpenAIHTTPProvider
from nanomem.providers.provider import ProviderError
from nanomem.providers.proxies import proxy_for
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.proxy_server import FakeProxy, make_certificate, server_context
from tests.fakes.socks_server import FakeSocks
from tests.helpers.http import USER, connected, fetch, ok, raw_server

TARGET = "model.example.test"  # resolves nowhere: only the proxy reaches it
PASSWORD = "s3cret:p@ss"  # percent-encoded in the proxy URL
VARIABLES = ("https_proxy", "http_proxy", "all_proxy", "no_proxy")


@pytest.fixture(autouse=True)
def no_proxy_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


@pytest.fixture
def certificate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    made = make_certificate(tmp_path, TARGET, "localhost")
    if made is None:
        pytest.skip("the openssl command makes the test certificate")
    monkeypatch.setenv("SSL_CERT_FILE", str(made[0]))  # the system trusts it
    return made


@pytest.fixture
async def tls_target(certificate: tuple[Path, Path]) -> AsyncIterator[int]:
    """A TLS server that answers every request with 200 "secret"; yields its port."""
    async with raw_server(lambda n: ok(b"secret"), tls=server_context(certificate)) as url:
        yield int(url.split(":")[2].split("/")[0])


def with_password(proxy: FakeProxy | FakeSocks, password: str = PASSWORD) -> str:
    return proxy.url.replace("://", f"://me:{password.replace(':', '%3A').replace('@', '%40')}@")


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def test_https_goes_through_a_tunnel_with_tls_to_the_target_on_one_connection(
    tls_target: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeProxy(tls_target) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        async with connected(f"https://{TARGET}/v1/chat/completions") as pool:
            for _ in range(3):
                assert await fetch(pool) == (200, b"secret")
    assert proxy.connects == [f"{TARGET}:443"]  # one tunnel, kept alive
    assert proxy.request_lines == [f"CONNECT {TARGET}:443 HTTP/1.1"]
    assert pool.opened == 1 and proxy.connections == 1


async def test_the_targets_certificate_and_name_are_verified_inside_the_tunnel(
    tls_target: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeProxy(tls_target) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        async with connected("https://other.example.test/v1/chat/completions") as pool:
            with pytest.raises(ConnectionFailed, match="CERTIFICATE_VERIFY_FAILED") as caught:
                await fetch(pool)
    assert proxy.connects == ["other.example.test:443"]  # the tunnel opened; TLS refused it
    assert f"through the proxy at 127.0.0.1:{proxy.port}" in str(caught.value)


async def test_an_https_proxy_carries_tls_inside_tls(
    certificate: tuple[Path, Path], tls_target: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeProxy(tls_target, tls=server_context(certificate)) as proxy:
        assert proxy.url.startswith("https://127.0.0.1:")
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        async with connected(f"https://{TARGET}/v1/chat/completions") as pool:
            assert await fetch(pool) == (200, b"secret")
    assert proxy.connects == [f"{TARGET}:443"]


async def test_http_goes_to_the_proxy_by_absolute_url_on_one_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with FakeOpenAI() as srv, FakeProxy(int(srv.base_url.split(":")[2].split("/")[0])) as proxy:
        monkeypatch.setenv("http_proxy", proxy.url)
        url = f"http://{TARGET}:8000/v1/chat/completions"
        async with connected(url) as pool:
            for _ in range(2):
                status, body = await fetch(pool)
                assert status == 200 and b"echo:" in body
        assert len(srv.requests) == 2
    assert proxy.request_lines == [f"POST {url} HTTP/1.1"] * 2
    assert proxy.connects == [] and pool.opened == 1 and proxy.connections == 1


async def test_credentials_from_the_proxy_url_are_sent_percent_decoded(
    tls_target: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeProxy(tls_target, credentials=("me", PASSWORD)) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", with_password(proxy))
        async with connected(f"https://{TARGET}/v1/chat/completions") as pool:
            assert await fetch(pool) == (200, b"secret")
    assert proxy.authorizations == [basic("me", PASSWORD)]


@pytest.mark.parametrize("scheme", ["https", "http"])
async def test_a_407_names_the_proxy_and_never_the_password(
    scheme: str, tls_target: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeProxy(tls_target, credentials=("me", "right")) as proxy:
        monkeypatch.setenv(f"{scheme}_proxy", with_password(proxy))
        async with connected(f"{scheme}://{TARGET}/v1/chat/completions") as pool:
            with pytest.raises(ConnectionFailed) as caught:
                await fetch(pool)
    message = str(caught.value)
    assert f"the proxy at 127.0.0.1:{proxy.port} refused" in message
    assert "407 Proxy Authentication Required" in message
    assert "s3cret" not in message and "me:" not in message
    assert proxy.authorizations == [basic("me", PASSWORD)]  # it was sent, and refused


async def test_a_proxy_that_is_down_is_named_without_its_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as spare:  # a port nothing listens on
        spare.bind(("127.0.0.1", 0))
        port = spare.getsockname()[1]
    monkeypatch.setenv("HTTPS_PROXY", f"http://me:{PASSWORD.replace(':', '%3A')}@127.0.0.1:{port}")
    llm = LLMSettings(model="openai/x", api_base=f"https://{TARGET}/v1", timeout_s=10)
    provider = OpenAIHTTPProvider(llm)
    with pytest.raises(ProviderError) as caught:
        await provider.complete(USER)
    await provider.close()
    assert caught.value.category == "unreachable"
    assert f"cannot connect to the proxy at 127.0.0.1:{port}" in str(caught.value)
    assert "s3cret" not in str(caught.value) and "me:" not in str(caught.value)


async def test_a_refusal_reaches_the_provider_as_unreachable_without_the_password(
    tls_target: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeProxy(tls_target, credentials=("me", "right")) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", with_password(proxy))
        llm = LLMSettings(model="openai/x", api_base=f"https://{TARGET}/v1", timeout_s=10)
        provider = OpenAIHTTPProvider(llm)
        with pytest.raises(ProviderError) as caught:
            await provider.complete(USER)
        await provider.close()
    assert caught.value.category == "unreachable" and "407" in str(caught.value)
    assert "s3cret" not in str(caught.value) and "s3cret" not in repr(proxy_for(llm.api_base))


async def test_no_proxy_sends_a_host_directly(
    tls_target: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeProxy(tls_target) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", "example.test")
        async with connected(f"https://{TARGET}/v1/chat/completions") as pool:
            with pytest.raises(ConnectionFailed, match=f"cannot connect to {TARGET}:443"):
                await fetch(pool)  # directly: no such host
    assert proxy.connections == 0


async def test_a_stalled_proxy_is_bounded_by_the_connect_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # accepts, reads, never answers the CONNECT

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    llm = LLMSettings(model="openai/x", api_base=f"https://{TARGET}/v1", timeout_s=0.5)
    provider = OpenAIHTTPProvider(llm)
    with pytest.raises(ProviderError) as caught:
        await asyncio.wait_for(provider.complete(USER), 60)  # a safety net
    await provider.close()
    server.close()
    assert caught.value.category == "timeout"


def test_the_proxy_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    assert proxy_for(f"https://{TARGET}/v1") is None
    monkeypatch.setenv("ALL_PROXY", "socks5://127.0.0.1:1080")
    assert proxy_for(f"https://{TARGET}/v1") == proxy_for(f"http://{TARGET}/v1")
    socks = proxy_for(f"https://{TARGET}/v1")
    assert socks is not None and socks.usable and socks.shown == "socks5://127.0.0.1:1080"
    monkeypatch.setenv("ALL_PROXY", "socks4://127.0.0.1:1080")  # a scheme httpx does not speak
    socks4 = proxy_for(f"https://{TARGET}/v1")
    assert socks4 is not None and not socks4.usable and "socks4://" in socks4.problem
    monkeypatch.setenv("https_proxy", "proxy.corp:3128")  # lowercase first; no scheme: http
    monkeypatch.setenv("HTTPS_PROXY", "http://other:1")
    chosen = proxy_for(f"https://{TARGET}/v1")
    assert chosen is not None and chosen.usable
    assert (chosen.variable, chosen.shown) == ("https_proxy", "http://proxy.corp:3128")
    assert proxy_for("https://127.0.0.1:8443/v1") is None  # loopback: never proxied


async def scripted_proxy(target_port: int, answer: bytes) -> asyncio.Server:
    """A proxy that answers a CONNECT with these bytes (in one write), then tunnels."""

    async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            sink.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target_port)
        writer.write(answer)
        await writer.drain()
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def test_bytes_a_proxy_sends_after_its_connect_answer_are_never_taken_for_the_target(
    tls_target: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """They arrive before TLS starts: read as the target's answer, a proxy could forge any
    reply it likes past the verified certificate."""
    forged = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged"
    server = await scripted_proxy(tls_target, b"HTTP/1.1 200 OK\r\n\r\n" + forged)
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    try:
        async with connected(f"https://{TARGET}/v1/chat/completions") as pool:
            # httpx starts TLS on the socket itself: bytes it read with the CONNECT answer
            # are dropped, and the answer is the one that came through the verified TLS.
            assert await fetch(pool) == (200, b"secret")
    finally:
        server.close()


async def test_an_informational_answer_to_connect_is_followed_by_the_real_one(
    tls_target: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 Connection established\r\n\r\n"
    server = await scripted_proxy(tls_target, answer)
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    try:
        async with connected(f"https://{TARGET}/v1/chat/completions") as pool:
            assert await fetch(pool) == (200, b"secret")
    finally:
        server.close()


async def test_https_goes_through_a_socks5_proxy_with_tls_to_the_target(
    tls_target: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeSocks(tls_target, credentials=("me", PASSWORD)) as socks:
        monkeypatch.setenv("ALL_PROXY", with_password(socks))
        async with connected(f"https://{TARGET}/v1/chat/completions") as pool:
            for _ in range(2):
                assert await fetch(pool) == (200, b"secret")
    assert socks.connects == [f"{TARGET}:443"]  # the name, resolved by the proxy; kept alive
    assert socks.logins == [("me", PASSWORD)] and pool.opened == 1


async def test_a_socks5_proxy_that_refuses_the_login_is_named_without_the_password(
    tls_target: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeSocks(tls_target, credentials=("me", "right")) as socks:
        monkeypatch.setenv("ALL_PROXY", with_password(socks))
        llm = LLMSettings(model="openai/x", api_base=f"https://{TARGET}/v1", timeout_s=10)
        provider = OpenAIHTTPProvider(llm)
        with pytest.raises(ProviderError) as caught:
            await provider.complete(USER)
        await provider.close()
    message = str(caught.value)
    assert caught.value.category == "unreachable"
    assert f"the proxy at 127.0.0.1:{socks.port} refused" in message
    assert "check the user and password" in message
    assert "s3cret" not in message and "me:" not in message and socks.connects == []


async def test_the_targets_certificate_is_verified_through_a_socks5_proxy(
    tls_target: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeSocks(tls_target) as socks:
        monkeypatch.setenv("ALL_PROXY", socks.url)
        async with connected("https://other.example.test/v1/chat/completions") as pool:
            with pytest.raises(ConnectionFailed, match="CERTIFICATE_VERIFY_FAILED") as caught:
                await fetch(pool)
    assert socks.connects == ["other.example.test:443"]
    assert f"through the proxy at 127.0.0.1:{socks.port}" in str(caught.value)
