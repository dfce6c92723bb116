"""The address guard: web tools never reach loopback, private, link-local or metadata
addresses (in any IPv6 disguise), whether named in the URL, resolved from a public-looking
name (DNS rebinding) or reached through a redirect; unless the owner allows it."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator

import pytest

from nanomem.features.web import AddressGuard, Web, WebClient, why_blocked
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider, text
from nanomem.tools import OUTSIDE, ToolRegistry
from tests.conftest import make_app
from tests.fakes.web_server import FakeResolver, FakeWeb, page

BLOCKED = {
    "127.0.0.1": "a loopback address",
    "127.8.9.10": "a loopback address",
    "10.1.2.3": "a private address",
    "172.16.0.1": "a private address",
    "192.168.1.1": "a private address",
    "100.64.0.1": "a carrier-grade NAT address",
    "169.254.169.254": "a cloud metadata address",
    "169.254.1.1": "a link-local address",
    "0.0.0.0": "the unspecified address",
    "224.0.0.1": "a multicast address",
    "240.0.0.1": "a private address",
    "::1": "a loopback address",
    "::": "the unspecified address",
    "fe80::1": "a link-local address",
    "fc00::1": "a private address",
    "fd00:ec2::254": "a cloud metadata address",
    "ff02::1": "a multicast address",
    "2001:db8::1": "a private address",
    "::ffff:127.0.0.1": "a loopback address inside an IPv6 address",
    "::ffff:169.254.169.254": "a cloud metadata address inside an IPv6 address",
    "2002:7f00:1::": "a loopback address inside an IPv6 address",  # 6to4 of 127.0.0.1
    "64:ff9b::a00:1": "a private address inside an IPv6 address",  # NAT64 of 10.0.0.1
    "::127.0.0.1": "a loopback address inside an IPv6 address",
    # Teredo, its client address 127.0.0.1 stored inverted
    "2001:0:4136:e378:8000:63bf:80ff:fffe": "a loopback address inside an IPv6 address",
}


@pytest.mark.parametrize(("address", "reason"), sorted(BLOCKED.items()))
def test_non_public_addresses_are_named_for_what_they_are(address: str, reason: str) -> None:
    assert why_blocked(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize("address", ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111"])
def test_public_addresses_pass(address: str) -> None:
    assert why_blocked(ipaddress.ip_address(address)) is None


@pytest.fixture(scope="module")
def inside() -> Iterator[FakeWeb]:
    """A server on this machine that the guard must keep the tools away from."""
    with FakeWeb() as server:
        server.serve("/article", page("article.html"))
        yield server


@pytest.fixture(scope="module")
def public() -> Iterator[FakeWeb]:
    """A server standing in for a public site: on 127.0.0.2, which the tests allow by
    `tools.web.allow_networks` while every other loopback address stays refused."""
    with FakeWeb(host="127.0.0.2") as server:
        server.serve("/article", page("article.html"))
        yield server


def tools(resolver: FakeResolver | None = None, **guard: object) -> ToolRegistry:
    client = WebClient(
        AddressGuard(**guard),  # type: ignore[arg-type]
        max_bytes=1_000_000,
        max_redirects=5,
        timeout_s=10,
        resolver=resolver,
    )
    feature = Web(client, search=None, max_output_chars=16000)  # type: ignore[arg-type]
    return ToolRegistry(feature.tools())


async def fetch(registry: ToolRegistry, url: str) -> str:
    return await registry.call("web_fetch", json.dumps({"url": url}), OUTSIDE)


async def test_the_default_app_refuses_this_machine(home: Home, inside: FakeWeb) -> None:
    """The settings as shipped: every spelling of this machine is refused, nothing is asked."""
    app = make_app(home, ScriptedProvider([text("ok")]))
    port = inside.port
    urls = {
        f"http://127.0.0.1:{port}/article": "127.0.0.1 is a loopback address",
        f"http://localhost:{port}/article": "localhost names this machine",
        f"http://LOCALHOST.:{port}/article": "localhost. names this machine",
        f"http://[::1]:{port}/article": "::1 is a loopback address",
        f"http://[::ffff:127.0.0.1]:{port}/article": "loopback address inside an IPv6 address",
        "http://169.254.169.254/latest/meta-data/": "a cloud metadata address",
        "http://metadata.google.internal/computeMetadata/v1/": "names this machine or a private",
        "http://[fe80::1]/": "a link-local address",
        "http://10.0.0.1/": "a private address",
    }
    before = len(inside.requests)
    for url, reason in urls.items():
        result = await app.tools.call("web_fetch", json.dumps({"url": url}), OUTSIDE)
        assert result.startswith(f"Error: web_fetch {url}: refused: "), result
        assert reason in result and "(tools.web.allow_private)" in result
    assert len(inside.requests) == before  # not one request reached the server


async def test_a_public_name_resolving_to_loopback_is_refused(inside: FakeWeb) -> None:
    """DNS rebinding: the check and the connection use the same lookup, so a name that
    answers 127.0.0.1 (alone, or beside a public address) is never connected to."""
    for answer in (["127.0.0.1"], ["93.184.216.34", "127.0.0.1"], ["::ffff:127.0.0.1"]):
        resolver = FakeResolver({"news.example": answer})
        before = len(inside.requests)
        result = await fetch(tools(resolver), f"http://news.example:{inside.port}/article")
        assert "refused: news.example (127.0.0.1) is a loopback address" in result or (
            "refused: news.example (::ffff:127.0.0.1) is a loopback address inside" in result
        )
        assert resolver.asked == ["news.example"]
        assert len(inside.requests) == before


async def test_a_redirect_from_a_public_site_to_loopback_is_refused(
    inside: FakeWeb, public: FakeWeb
) -> None:
    resolver = FakeResolver({"public.example": ["127.0.0.2"], "rebind.example": ["127.0.0.1"]})
    registry = tools(resolver, allow_networks=["127.0.0.2/32"])
    site = f"http://public.example:{public.port}"
    # The allowed "public" site itself is read.
    assert "Tide Tables" in await fetch(registry, f"{site}/article")
    before = len(inside.requests)
    for target in (inside.url("/article"), f"http://rebind.example:{inside.port}/article"):
        result = await fetch(registry, f"{site}/goto?to={target}")
        assert "refused:" in result and "is a loopback address" in result
    assert len(inside.requests) == before


async def test_allow_private_lets_the_owner_reach_this_machine(inside: FakeWeb) -> None:
    result = await fetch(tools(allow_private=True), inside.url("/article"))
    assert "Tide Tables of the North Sea Explained" in result
