"""The front door's rules without a server: the signed cookie, the rate limit, where a login may
send the browser next, and the one-time codes kept in the home."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import make_mocked_request

from channels.web.auth import COOKIE, Gate, is_web_path
from channels.web.login import PER_CLIENT, WINDOW_S, Throttle, safe_next
from channels.web.site import Site
from nanomem.cli.web_setup import web_address
from nanomem.config import ConfigError, GatewaySettings, WebAppSettings, load_settings
from nanomem.home import Home
from nanomem.web_logins import VALID_S, consume, end_session, ended_sessions, new_code

TOKEN = "a-token-for-these-tests-0123456789"


def gate(token: str = TOKEN, **web: Any) -> Gate:
    settings = WebAppSettings(enabled=True, token=token, **web)
    return Gate.of(Site(app=None, settings=settings, channel=None))  # type: ignore[arg-type]


def asking(cookie: str = "", **headers: str) -> Any:
    if cookie:
        headers["Cookie"] = f"{COOKIE}={cookie}"
    return make_mocked_request("GET", "/chat", headers=headers)


def test_a_cookie_is_taken_only_as_signed_unexpired_and_not_logged_out() -> None:
    door = gate()
    later = int(time.time()) + 3600
    assert door.session_of(asking(door.cookie("abc", later))) == ("abc", later)
    forged = f"abc.{later}.{'0' * 64}"
    other = gate("another-token-entirely-0123456789").cookie("abc", later)  # re-signed
    stretched = door.cookie("abc", later).replace(str(later), str(later + 86400), 1)
    expired = door.cookie("abc", int(time.time()) - 1)
    for cookie in (forged, other, stretched, expired, "abc", "", "a.b.c", f"abc.{'9' * 40}.x"):
        assert door.session_of(asking(cookie)) is None, cookie
    door.ended.add("abc")
    assert door.session_of(asking(door.cookie("abc", later))) is None


def test_csrf_tokens_belong_to_one_login() -> None:
    door = gate()
    assert door.csrf("one") != door.csrf("two")
    assert door.csrf("one") != gate("another-token-entirely-0123456789").csrf("one")


def test_the_client_is_the_peer_unless_a_proxy_is_trusted() -> None:
    spoofed = {"X-Forwarded-For": "10.9.9.9", "X-Forwarded-Proto": "https"}
    direct = gate()
    assert direct.client(asking(**spoofed)) != "10.9.9.9"
    assert not direct.is_https(asking(**spoofed))
    proxied = gate(behind_proxy=True)
    # The proxy appends the address it saw: the ones before it are the client's own claim.
    chain = asking(**{"X-Forwarded-For": "1.2.3.4, 10.9.9.9", "X-Forwarded-Proto": "https"})
    assert proxied.client(chain) == "10.9.9.9"
    assert proxied.is_https(chain)
    assert not proxied.is_https(asking(**{"X-Forwarded-Proto": "http"}))


def test_five_failures_a_minute_wait_out_the_minute_and_others_may_try() -> None:
    throttle = Throttle()
    for n in range(PER_CLIENT):
        assert throttle.wait_s("mallory", now=100.0 + n) == 0
        throttle.failed("mallory", now=100.0 + n)
    assert throttle.wait_s("mallory", now=105.0) == pytest.approx(WINDOW_S - 5)
    assert throttle.wait_s("owner", now=105.0) == 0
    assert throttle.wait_s("mallory", now=100.0 + WINDOW_S) == 0  # the first has aged out


def test_failures_spread_over_many_addresses_slow_everyone() -> None:
    throttle = Throttle(per_client=5, overall=20)
    for n in range(20):
        throttle.failed(f"10.0.0.{n}", now=100.0)
    assert throttle.wait_s("owner", now=110.0) == pytest.approx(WINDOW_S - 10)


def test_the_address_after_a_login_is_a_path_of_this_site() -> None:
    assert safe_next("/memory?x=1") == "/memory?x=1"
    for elsewhere in (
        "https://evil.example/",
        "//evil.example/",
        "/\\evil.example",
        "javascript:alert(1)",
        "/x\r\nSet-Cookie: a=b",
        "",
        "/" + "a" * 5000,
    ):
        assert safe_next(elsewhere) == "/", elsewhere


def test_the_web_apps_paths_and_nothing_else() -> None:
    for path in ("/", "/login", "/login/abc", "/static/style.css", "/chat/c/x", "/logout"):
        assert is_web_path(path), path
    for path in ("/health", "/v1/models", "/chatter", "/slack/events", "/telegram/webhook"):
        assert not is_web_path(path), path


def test_a_web_token_must_be_one_nobody_guesses(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    for weak in ("shortish", "has spaces in it but long", "x" * 15):
        config.write_text(f'[web]\ntoken = "{weak}"\n')
        with pytest.raises(ConfigError, match="at least 16 characters") as caught:
            load_settings(config, {})
        assert weak not in str(caught.value)
    assert WebAppSettings(token="  ").token is None  # blank: made by the gateway


def test_tls_needs_both_files_and_the_address_says_https() -> None:
    with pytest.raises(ValueError, match="set together"):
        GatewaySettings(tls_cert="/c.pem")
    gateway = GatewaySettings(host="0.0.0.0", port=8443, tls_cert="/c.pem", tls_key="/k.pem")
    assert web_address(gateway) == "https://127.0.0.1:8443"
    assert web_address(GatewaySettings(host="::1"), 5) == "http://[::1]:5"


def test_off_loopback_the_web_app_wants_tls_or_a_proxy() -> None:
    web = WebAppSettings(enabled=True, token=TOKEN)
    assert "will not serve gateway.host = '0.0.0.0'" in str(web.start_problem("0.0.0.0", False))
    assert web.start_problem("0.0.0.0", True) is None
    assert web.start_problem("::1", False) is None and web.start_problem("localhost", False) is None
    assert WebAppSettings(token=TOKEN, behind_proxy=True).start_problem("10.1.2.3", False) is None
    assert "web.token is not set" in str(WebAppSettings().start_problem("127.0.0.1", False))


async def test_a_code_logs_in_once_within_ten_minutes_and_is_kept_hashed(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    code = new_code(home)
    stored = home.web_logins.read_text()
    assert code not in stored and oct(home.web_logins.stat().st_mode)[-3:] == "600"
    assert await consume(home, code)
    assert not await consume(home, code)  # once
    old = new_code(home, now=time.time() - VALID_S - 1)
    assert not await consume(home, old)  # expired
    assert not await consume(home, "../../etc/passwd")
    assert not await consume(home, "A" * 32)  # the right shape, never made


async def test_a_broken_file_costs_a_link_and_nothing_more(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.root.mkdir(parents=True)
    for broken in (
        "{not json",
        json.dumps({"version": 99}),
        json.dumps({"version": 1, "codes": 5}),
    ):
        home.web_logins.write_text(broken)
        assert not await consume(home, "A" * 32)
        code = new_code(home)
        assert await consume(home, code)


async def test_a_logout_is_remembered_until_the_cookie_would_expire(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    await end_session(home, "gone", time.time() + 60)
    await end_session(home, "long-gone", time.time() - 1)
    assert await ended_sessions(home) == {"gone"}


def test_config_error_is_what_the_gateway_turns_into_exit_2() -> None:
    from nanomem.gateway.health import tls_context

    missing = GatewaySettings(tls_cert="/nonexistent/c.pem", tls_key="/nonexistent/k.pem")
    with pytest.raises(ConfigError, match="does not exist"):
        tls_context(missing)


async def test_a_page_sees_its_login_through_typed_request_keys() -> None:
    # A plain string key on the request is aiohttp's NotAppKeyWarning on every page served.
    from aiohttp import web

    from channels.web.auth import CONTEXT, GATE_KEY, SESSION, owner_only

    the_gate = gate()
    app = web.Application()
    app[GATE_KEY] = the_gate
    cookie = the_gate.cookie("abc", int(time.time()) + 60)
    request = make_mocked_request("GET", "/chat", {"Cookie": f"{COOKIE}={cookie}"}, app=app)
    seen: list[tuple[str, str]] = []

    async def shown(request: web.Request) -> web.Response:
        seen.append((request[SESSION], request[CONTEXT]["csrf"]))
        return web.Response()

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        await owner_only(shown)(request)
    assert seen == [("abc", the_gate.csrf("abc"))]


async def test_a_pages_own_request_without_a_login_is_told_so_not_redirected() -> None:
    # fetch follows a redirect to the login page's 200: a message sent after a logout in
    # another tab was taken as sent, its words cleared and lost.
    from aiohttp import web

    from channels.web.auth import GATE_KEY, LOGGED_OUT, owner_only

    app = web.Application()
    app[GATE_KEY] = gate()

    async def never(request: web.Request) -> web.Response:
        raise AssertionError("a stranger reached the page")

    for mode in ("cors", "same-origin", "no-cors"):
        headers = {"Sec-Fetch-Mode": mode}
        request = make_mocked_request("POST", "/chat/c/web%3Aabcdefgh/send", headers, app=app)
        answer = await owner_only(never)(request)
        assert isinstance(answer, web.Response)
        assert (answer.status, answer.text) == (401, LOGGED_OUT)
    navigating = make_mocked_request("GET", "/memory", {"Sec-Fetch-Mode": "navigate"}, app=app)
    with pytest.raises(web.HTTPSeeOther) as sent:
        await owner_only(never)(navigating)
    assert sent.value.location == "/login?next=%2Fmemory"
