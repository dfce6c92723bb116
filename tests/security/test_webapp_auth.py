"""The web app's front door, attacked: every route that changes state refuses a request without
the login's CSRF token, with another login's, and from another site's form (the routes are
read from the app itself, so one added later is covered too); forged, stretched, re-signed and
logged-out cookies; a changed token; guessing the token; a one-time link used twice or late."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote

import httpx
import pytest
from playwright.sync_api import Browser

from channels.web.auth import COOKIE, CSRF_HEADER
from channels.web.login import BUSY, PER_CLIENT, USED
from nanomem.home import Home
from nanomem.web_logins import VALID_S, new_code
from tests.conftest import run_cli
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.web_server import FakeWeb
from tests.helpers.browser import WEB_TOKEN, base_url, log_in, web_gateway
from tests.helpers.gateway import GatewayProcess, onboarded
from tests.helpers.web_login import logged_in, routes

pytestmark = pytest.mark.slow

CHANGES = ("POST", "PUT", "PATCH", "DELETE")
# The login itself comes before any session: guessing is what the rate limit is for.
BEFORE_LOGIN = {("POST", "/login")}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    home: Home = onboarded(tmp_path_factory, "web-auth")
    with FakeOpenAI() as llm, web_gateway(home, llm) as running:
        yield running


def state_changing(home: Home) -> list[tuple[str, str]]:
    changing = [r for r in routes(home) if r[0] in CHANGES and r not in BEFORE_LOGIN]
    assert ("POST", "/logout") in changing  # the enumeration sees what is there
    return changing


def test_every_state_change_wants_this_logins_csrf_token(gateway: GatewayProcess) -> None:
    base = base_url(gateway)
    mine, my_csrf = logged_in(base)
    other, other_csrf = logged_in(base)
    assert my_csrf != other_csrf
    for method, path in state_changing(gateway.home):
        bare = mine.request(method, path)
        assert bare.status_code == 403, (method, path, bare.status_code)
        as_header = mine.request(method, path, headers={CSRF_HEADER: other_csrf})
        assert as_header.status_code == 403, (method, path, as_header.status_code)
        as_field = mine.request(method, path, data={"csrf": other_csrf})
        assert as_field.status_code == 403, (method, path, as_field.status_code)
        nobody = httpx.request(method, f"{base}{path}", headers={CSRF_HEADER: my_csrf})
        assert nobody.status_code in (303, 401), (method, path, nobody.status_code)
    # The check can tell: with its own token the same request goes through.
    out = mine.post("/logout", data={"csrf": my_csrf})
    assert (out.status_code, out.headers["location"]) == (303, "/login")
    other.close()


def test_no_state_change_from_another_sites_form(browser: Browser, gateway: GatewayProcess) -> None:
    """A page on another site (localhost is not 127.0.0.1's site) posts a form to each route
    while the owner is logged in: the SameSite=Strict cookie stays home, so it meets the
    login, not the route."""
    base = base_url(gateway)
    context = browser.new_context()
    page = context.new_page()
    log_in(page, base)
    with FakeWeb() as elsewhere:
        for method, path in state_changing(gateway.home):
            attack = elsewhere.serve(
                f"/attack{len(elsewhere.routes)}",
                f'<!doctype html><form method="post" action="{base}{path}">'
                '<input name="csrf" value="guessed"><input name="text" value="hi"></form>'
                "<script>document.forms[0].submit()</script>",
            )
            with page.expect_response(lambda r: r.request.method == "POST") as posted:
                page.goto(attack.replace("127.0.0.1", "localhost"))
            assert posted.value.status == 303, (method, path)
            assert posted.value.headers["location"].startswith("/login"), (method, path)
            page.wait_for_url(f"{base}/login*")
        # The control: from this site (another port is the same site) the cookie does come
        # along, and the CSRF token is what stops the form.
        same_site = elsewhere.serve(
            "/same-site",
            f'<!doctype html><form method="post" action="{base}/logout">'
            '<input name="csrf" value="guessed"></form><script>document.forms[0].submit()</script>',
        )
        with page.expect_response(lambda r: r.request.method == "POST") as posted:
            page.goto(same_site)
        assert posted.value.status == 403
    page.goto(f"{base}/chat")  # still logged in: the attack changed nothing of the login
    assert page.url == f"{base}/chat"
    context.close()


def test_a_cookie_that_was_not_issued_as_is_meets_the_login(gateway: GatewayProcess) -> None:
    base = base_url(gateway)
    client, _ = logged_in(base)
    issued = client.cookies[COOKIE]
    session, expires, signature = issued.split(".")
    later = str(int(expires) + 365 * 86400)
    forged = [
        f"{session}.{expires}.{'0' * 64}",  # no signature
        f"{session}.{later}.{signature}",  # stretched
        f"{session}x.{expires}.{signature}",  # another session, the same signature
        f"{session}.{int(time.time()) - 10}.{signature}",  # expired
        "",
        "." * 3,
        "a" * 5000,
    ]
    for cookie in forged:
        answer = httpx.get(f"{base}/memory", cookies={COOKIE: cookie}, follow_redirects=False)
        assert answer.status_code == 303, cookie
        assert answer.headers["location"].startswith("/login")
    assert httpx.get(f"{base}/memory", cookies={COOKIE: issued}).status_code == 200
    client.close()


def test_a_logout_survives_a_restart_and_a_new_token_logs_everyone_out(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    home = onboarded(tmp_path_factory, "web-restart")
    with FakeOpenAI() as llm:
        with web_gateway(home, llm) as first:
            stays, _ = logged_in(base_url(first))
            leaves, csrf = logged_in(base_url(first))
            kept, copied = stays.cookies[COOKIE], leaves.cookies[COOKIE]  # a thief's copy
            assert leaves.post("/logout", data={"csrf": csrf}).status_code == 303
            refused = httpx.get(f"{base_url(first)}/memory", cookies={COOKIE: copied})
            assert refused.status_code == 303
        with web_gateway(home, llm) as second:
            base = base_url(second)
            assert httpx.get(f"{base}/memory", cookies={COOKIE: kept}).status_code == 200
            again = httpx.get(f"{base}/memory", cookies={COOKIE: copied})
            assert again.status_code == 303, "a logged-out login came back after a restart"
        new_token = {"NANOMEM_WEB__TOKEN": "an-entirely-new-token-987654321"}
        with web_gateway(home, llm, **new_token) as third:
            answer = httpx.get(f"{base_url(third)}/memory", cookies={COOKIE: kept})
            assert answer.status_code == 303


def test_a_one_time_link_logs_in_once(browser: Browser, gateway: GatewayProcess) -> None:
    made = run_cli("web-link", env=gateway.env)
    assert made.returncode == 0, made.stderr
    link = made.stdout.strip()
    assert re.fullmatch(rf"{base_url(gateway)}/login/[A-Za-z0-9_-]{{32}}", link), link
    assert link.rsplit("/", 1)[1] not in gateway.home.web_logins.read_text()  # hashed at rest
    first = browser.new_context()
    page = first.new_page()
    page.goto(link)
    page.wait_for_url(f"{base_url(gateway)}/chat")
    (cookie,) = first.cookies()
    assert (cookie["httpOnly"], cookie["sameSite"], cookie["secure"]) == (True, "Strict", False)
    first.close()
    again = browser.new_context()
    page = again.new_page()
    answer = page.goto(link)
    assert answer is not None and answer.status == 403
    assert page.get_by_role("alert").inner_text() == USED
    assert again.cookies() == []
    late = new_code(gateway.home, now=time.time() - VALID_S - 1)
    answer = page.goto(f"{base_url(gateway)}/login/{late}")
    assert answer is not None and answer.status == 403 and again.cookies() == []
    again.close()


def test_guessing_the_token_is_slowed_to_five_tries_a_minute(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    home = onboarded(tmp_path_factory, "web-guess")
    with FakeOpenAI() as llm, web_gateway(home, llm) as running:
        guessed(base_url(running))


def guessed(base: str) -> None:
    for n in range(PER_CLIENT):
        # A made-up X-Forwarded-For changes nothing: this gateway is not behind a proxy.
        spoof = {"X-Forwarded-For": f"10.0.0.{n}"}
        wrong = httpx.post(f"{base}/login", data={"token": f"guess-{n}"}, headers=spoof)
        assert wrong.status_code == 401
        assert "That token is wrong." in wrong.text and f"guess-{n}" not in wrong.text
    for attempt in (
        httpx.post(f"{base}/login", data={"token": WEB_TOKEN}),  # even the right one, now
        httpx.get(f"{base}/login/{'A' * 32}"),
    ):
        assert attempt.status_code == 429
        assert 0 < int(attempt.headers["retry-after"]) <= 60
        assert BUSY in attempt.text
        assert COOKIE not in attempt.headers.get("set-cookie", "")


def test_behind_a_proxy_the_limit_is_per_client(tmp_path_factory: pytest.TempPathFactory) -> None:
    home = onboarded(tmp_path_factory, "web-proxy")
    with FakeOpenAI() as llm, web_gateway(home, llm, NANOMEM_WEB__BEHIND_PROXY="true") as running:
        base = base_url(running)
        mallory = {"X-Forwarded-For": "203.0.113.9, 10.0.0.66"}  # the proxy saw 10.0.0.66
        for _ in range(PER_CLIENT):
            assert (
                httpx.post(f"{base}/login", data={"token": "x"}, headers=mallory).status_code == 401
            )
        assert httpx.post(f"{base}/login", data={"token": "x"}, headers=mallory).status_code == 429
        owner = {"X-Forwarded-For": "10.0.0.7", "X-Forwarded-Proto": "https"}
        answer = httpx.post(f"{base}/login", data={"token": WEB_TOKEN}, headers=owner)
        assert answer.status_code == 303
        cookie = answer.headers["set-cookie"]
        assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert answer.headers["strict-transport-security"].startswith("max-age=")
        link = f"{base}/login/{quote(new_code(home))}"
        assert httpx.get(link, headers=mallory).status_code == 429  # the same door
        assert httpx.get(link, headers=owner).status_code == 200
        # A burst sent all at once is counted as it is decided: five wrong, then refused;
        # also when every guess's body comes only after all their headers are in.
        tokens = burst(30, "POST", f"{base}/login", {"X-Forwarded-For": "10.0.0.99"})
        assert sorted(tokens) == [401] * PER_CLIENT + [429] * (30 - PER_CLIENT)
        held = held_back_logins(running.port, 30, "10.0.0.97")
        assert sorted(held) == [401] * PER_CLIENT + [429] * (30 - PER_CLIENT)
        codes = burst(30, "GET", f"{base}/login/{'B' * 32}", {"X-Forwarded-For": "10.0.0.98"})
        assert sorted(codes) == [403] * PER_CLIENT + [429] * (30 - PER_CLIENT)


def burst(count: int, method: str, url: str, headers: dict[str, str]) -> list[int]:
    """`count` requests sent at once, each on its own connection; their statuses."""
    ready = threading.Barrier(count)

    def one(_: int) -> int:
        with httpx.Client(timeout=30) as client:
            ready.wait()
            data = {"token": "a-wrong-guess"} if method == "POST" else None
            return client.request(method, url, data=data, headers=headers).status_code

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, range(count)))


def held_back_logins(port: int, count: int, client: str) -> list[int]:
    """`count` wrong logins whose headers all arrive first and whose bodies follow together
    (what a limit checked before the body is read would let through); their statuses."""
    body = b"token=a-wrong-guess"
    head = (
        f"POST /login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Forwarded-For: {client}\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\nConnection: close\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    sockets = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(count)]
    try:
        for each in sockets:
            each.sendall(head)
        time.sleep(0.5)  # every request is waiting for its body now
        for each in sockets:
            each.sendall(body)
        statuses = []
        for each in sockets:
            first = each.makefile("rb").readline()
            statuses.append(int(first.split()[1]))
        return statuses
    finally:
        for each in sockets:
            each.close()
