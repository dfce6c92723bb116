"""web_search with each provider against a loopback server answering in that provider's real
response shape; its failures as short tool errors that never hold the key."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from nanomem.config import ConfigError, load_settings
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider, text
from nanomem.tools import OUTSIDE
from tests.conftest import cli_env, make_app, run_cli_here
from tests.fakes.web_server import BRAVE_KEY, TAVILY_KEY, FakeWeb

NUMBERED = re.compile(r"^(\d+)\. (.+)\n   (\S+)\n   (.+)$", re.M)


@pytest.fixture
def site() -> Iterator[FakeWeb]:
    with FakeWeb() as server:
        yield server


def provider_settings(site: FakeWeb, provider: str, **more: object) -> dict[str, object]:
    """tools.web for `provider` at the fake (loopback: allowed, as the guard refuses it)."""
    values: dict[str, object] = {"search_provider": provider, "allow_private": True}
    if provider == "duckduckgo":
        values["search_base_url"] = site.url("/html/")
    elif provider == "brave":
        values |= {"search_base_url": site.url(""), "brave_api_key": BRAVE_KEY}
    elif provider == "tavily":
        values |= {"search_base_url": site.url(""), "tavily_api_key": TAVILY_KEY}
    else:
        values["searxng_url"] = site.url("")
    return values | more


async def search(home: Home, site: FakeWeb, provider: str, count: int = 5, **more: object) -> str:
    app = make_app(
        home,
        ScriptedProvider([text("ok")]),
        tools={"web": provider_settings(site, provider, **more)},
    )
    arguments = json.dumps({"query": "nanomem release", "count": count})
    return await app.tools.call("web_search", arguments, OUTSIDE)


@pytest.mark.parametrize("provider", ["duckduckgo", "brave", "tavily", "searxng"])
async def test_each_provider_gives_numbered_framed_results(
    home: Home, site: FakeWeb, provider: str
) -> None:
    result = await search(home, site, provider)
    assert result.startswith("<<untrusted ") and " from web search (" in result.splitlines()[0]
    found = NUMBERED.findall(result)
    assert found[0] == (
        "1",
        "Nanomem release notes",
        "https://nanomem.example/releases",
        "What's new",
    )
    assert found[1] == (
        "2",
        "Second result",
        "https://other.example/page?a=1&b=2",
        "More text here",
    )
    assert [number for number, *_ in found] == ["1", "2", "3"]
    assert "Ad" not in [title for _, title, *_ in found]  # DuckDuckGo's ad block is skipped


@pytest.mark.parametrize("provider", ["duckduckgo", "brave", "tavily", "searxng"])
async def test_count_is_respected(home: Home, site: FakeWeb, provider: str) -> None:
    assert len(NUMBERED.findall(await search(home, site, provider, count=2))) == 2


async def test_what_each_provider_was_sent(home: Home, site: FakeWeb) -> None:
    for provider in ("brave", "tavily", "searxng", "duckduckgo"):
        await search(home, site, provider, count=3)
    brave, tavily, searxng, duckduckgo = site.requests
    assert brave[:2] == ("GET", "/res/v1/web/search?q=nanomem+release&count=3")
    assert brave[2]["X-Subscription-Token"] == BRAVE_KEY
    assert tavily[:2] == ("POST", "/search")
    assert tavily[2]["Authorization"] == f"Bearer {TAVILY_KEY}"
    assert json.loads(tavily[3]) == {
        "query": "nanomem release",
        "max_results": 3,
        "search_depth": "basic",
    }
    assert searxng[:2] == ("GET", "/search?q=nanomem+release&format=json")
    assert duckduckgo[:2] == ("POST", "/html/") and b"q=nanomem+release" in duckduckgo[3]
    assert all("Cookie" not in headers for _, _, headers, _ in site.requests)


async def test_no_results_and_a_blocked_search_say_so(home: Home, site: FakeWeb) -> None:
    site.search_results = []
    names = {"duckduckgo": "DuckDuckGo", "brave": "Brave", "tavily": "Tavily", "searxng": "SearXNG"}
    for provider, name in names.items():
        assert await search(home, site, provider) == f"No results for 'nanomem release' ({name})."
    site.duckduckgo_redesigned = True
    assert "held no results nanomem could read" in await search(home, site, "duckduckgo")
    site.duckduckgo_blocked = True
    assert await search(home, site, "duckduckgo") == (
        "Error: web_search: DuckDuckGo blocked the search (a bot check): try again later"
    )


@pytest.mark.parametrize(
    ("status", "says"),
    [
        (401, "refused the request (401): check its API key"),
        (429, "is rate limiting searches (429): try again later"),
        (500, "failed (500): try again later"),
        (503, "failed (503): try again later"),
    ],
)
@pytest.mark.parametrize("provider", ["duckduckgo", "brave", "tavily", "searxng"])
async def test_errors_are_short_and_hold_no_key(
    home: Home, site: FakeWeb, provider: str, status: int, says: str
) -> None:
    site.search_status = status
    result = await search(home, site, provider)
    assert result.startswith("Error: web_search: ") and says in result
    assert BRAVE_KEY not in result and TAVILY_KEY not in result and "Traceback" not in result


async def test_a_wrong_key_is_a_401_and_never_echoed(home: Home, site: FakeWeb) -> None:
    wrong = "brave-wrong-key-00000000000000"
    result = await search(home, site, "brave", brave_api_key=wrong)
    assert result == "Error: web_search: Brave refused the request (401): check its API key"


@pytest.mark.parametrize("provider", ["duckduckgo", "brave", "tavily", "searxng"])
async def test_a_search_that_hangs_hits_the_time_limit(
    home: Home, site: FakeWeb, provider: str
) -> None:
    site.search_delay_s = 1.5
    result = await search(home, site, provider, timeout_s=0.5)
    assert result == "Error: web_search: no complete answer within 0.5 s"


async def test_provider_endpoints_go_through_the_guard_but_searxng_is_the_owners(
    home: Home, site: FakeWeb
) -> None:
    """Brave's endpoint on loopback is refused like any page; a SearXNG URL the owner set
    (often on their LAN) is theirs to choose."""
    refused = await search(home, site, "brave", allow_private=False)
    assert refused.startswith("Error: web_search: refused: 127.0.0.1 is a loopback address")
    assert "Nanomem release notes" in await search(home, site, "searxng", allow_private=False)


@pytest.mark.parametrize(
    ("provider", "key"),
    [("brave", "brave_api_key"), ("tavily", "tavily_api_key"), ("searxng", "searxng_url")],
)
def test_a_provider_without_its_key_is_a_config_error(
    tmp_path: Path, provider: str, key: str
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'[tools.web]\nsearch_provider = "{provider}"\n')
    with pytest.raises(ConfigError) as raised:
        load_settings(config)
    assert str(raised.value) == (
        f'config error: tools.web.{key}: is required when search_provider = "{provider}" (default)'
    )


def test_a_bad_value_names_its_line(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        '[tools.web]\nmax_redirects = 99\nsearxng_url = "ftp://x"\nallow_networks = ["lan"]\n'
    )
    with pytest.raises(ConfigError) as raised:
        load_settings(config)
    message = str(raised.value)
    assert (
        f"tools.web.max_redirects: Input should be less than or equal to 20 ({config}, line 2)"
        in message
    )
    assert "tools.web.searxng_url: not an http:// or https:// URL with a host" in message
    assert f"({config}, line 3)" in message
    assert (
        f"tools.web.allow_networks: 'lan' is not a network (e.g. 192.168.1.0/24) ({config}, line 4)"
        in message
    )


def test_search_keys_are_masked(home: Home, site: FakeWeb) -> None:
    from nanomem.log import redact

    make_app(home, ScriptedProvider([]), tools={"web": provider_settings(site, "tavily")})
    assert TAVILY_KEY not in redact(f"the key is {TAVILY_KEY}")


def test_status_says_what_the_web_tools_may_do(home: Home) -> None:
    env = cli_env(home)
    assert "web tools       enabled, search by duckduckgo; public addresses only" in (
        run_cli_here("status", env=env).stdout
    )
    env |= {
        "NANOMEM_TOOLS__WEB__SEARCH_PROVIDER": "tavily",
        "NANOMEM_TOOLS__WEB__TAVILY_API_KEY": TAVILY_KEY,
        "NANOMEM_TOOLS__WEB__ALLOW_NETWORKS": '["192.168.1.0/24"]',
    }
    shown = run_cli_here("status", env=env).stdout
    assert TAVILY_KEY not in shown
    assert (
        f"search by tavily, key ***{TAVILY_KEY[-4:]}; public addresses and 192.168.1.0/24" in shown
    )
    env["NANOMEM_TOOLS__WEB__ENABLED"] = "false"
    assert "web tools       disabled (tools.web.enabled)" in run_cli_here("status", env=env).stdout
