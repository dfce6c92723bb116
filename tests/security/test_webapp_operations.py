"""The attacker's pass on the Recall and Schedules & tasks pages, over HTTP against the real
gateway: a state change without the login's CSRF token, or for an id that is not there, or
not logged in, changes nothing and says so; hostile search queries (huge, regex-like, NUL
bytes, FTS5 syntax) are answered within bounds, as text."""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import httpx
import pytest

from nanomem.agent import parked_in
from nanomem.features.schedules.rules import make_schedule
from nanomem.features.schedules.store import ScheduleStore
from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.browser import WEB_TOKEN, base_url, web_gateway
from tests.helpers.gateway import GatewayProcess, onboarded
from tests.helpers.inbox import parked_message

pytestmark = pytest.mark.slow


@dataclass
class Served:
    gateway: GatewayProcess
    base: str
    home: Home
    schedule: str
    parked: int


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home: Home = onboarded(tmp_path_factory, "web-operations-attacks")
    store = ScheduleStore(home.schedules, home.lock("schedules"))
    made = make_schedule(
        "cli:direct", "keep me", at=None, every_minutes=60, cron=None,
        zone=ZoneInfo("UTC"), now=datetime.now(UTC),
    )  # fmt: skip
    store.add(made)
    seq = parked_message(home, "keep me parked")
    with FakeOpenAI() as llm, web_gateway(home, llm) as gateway:
        yield Served(gateway, base_url(gateway), home, made.id, seq)


def logged_in(served: Served) -> tuple[httpx.Client, str]:
    """A client with a login's cookie, and that login's CSRF token (from a page's form)."""
    client = httpx.Client(base_url=served.base, follow_redirects=False, timeout=30)
    assert client.post("/login", data={"token": WEB_TOKEN}).status_code == 303
    page = client.get("/operations")
    assert page.status_code == 200
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert found is not None
    return client, found.group(1)


def unchanged(served: Served) -> bool:
    store = ScheduleStore(served.home.schedules, served.home.lock("schedules"))
    parked = [p.seq for p in parked_in(served.home.inbox)]
    return store.get(served.schedule) is not None and parked == [served.parked]


def actions(served: Served) -> list[str]:
    return [
        f"/operations/schedules/{served.schedule}/cancel",
        "/operations/tasks/beef/stop",
        f"/operations/parked/{served.parked}/retry",
        f"/operations/parked/{served.parked}/drop",
    ]


def test_a_change_without_the_logins_csrf_token_changes_nothing(served: Served) -> None:
    client, token = logged_in(served)
    other, other_token = logged_in(served)  # another login's token is not this one's
    for path in actions(served):
        for sent in [{}, {"csrf": ""}, {"csrf": "0" * 64}, {"csrf": other_token}]:
            answer = client.post(path, data=sent)
            assert answer.status_code == 403, (path, sent)
            assert answer.text == "This form has expired: reload the page."
        header = client.post(path, headers={"X-CSRF-Token": other_token, "HX-Request": "true"})
        assert header.status_code == 403
    assert unchanged(served)
    assert token != other_token
    client.close()
    other.close()


def test_a_stranger_is_sent_to_the_login_and_changes_nothing(served: Served) -> None:
    with httpx.Client(base_url=served.base, follow_redirects=False, timeout=30) as stranger:
        for path in actions(served):
            answer = stranger.post(path, data={"csrf": "0" * 64})
            assert (answer.status_code, answer.headers["location"]) == (303, "/login")
            htmx = stranger.post(path, headers={"HX-Request": "true"})
            assert (htmx.status_code, htmx.headers["HX-Redirect"]) == (401, "/login")
        for section in ("schedules", "tasks", "mcp", "parked", "health", "usage"):
            answer = stranger.get(f"/operations/{section}")
            assert answer.status_code == 303 and "keep me" not in answer.text
        assert stranger.get("/recall?q=keep").status_code == 303
    assert unchanged(served)


def test_ids_that_are_not_there_are_said_and_change_nothing(served: Served) -> None:
    client, token = logged_in(served)
    missing = {
        "/operations/schedules/nothere/cancel": "No schedule &#39;nothere&#39;",
        "/operations/tasks/beef/stop": "No background task &#39;beef&#39;.",
        "/operations/parked/999999/retry": "No parked message #999999.",
        "/operations/parked/999999/drop": "No parked or failed message #999999.",
    }
    for path, said in missing.items():
        answer = client.post(path, data={"csrf": token})
        assert answer.status_code == 404 and said in answer.text, path
        htmx = client.post(path, headers={"X-CSRF-Token": token, "HX-Request": "true"})
        assert htmx.status_code == 200 and said in htmx.text and "<html" not in htmx.text
    malformed = [
        "/operations/schedules/..%2F..%2Fconfig/cancel",
        f"/operations/schedules/{'x' * 5000}/cancel",
        "/operations/schedules/a%00b/cancel",
        "/operations/tasks/ZZZZ/stop",
        "/operations/parked/-1/retry",
        "/operations/parked/1e9/drop",
        f"/operations/parked/{'9' * 40}/drop",
    ]
    for path in malformed:
        answer = client.post(path, data={"csrf": token})
        assert answer.status_code == 404, path
        assert "Traceback" not in answer.text and len(answer.text) < 200
    assert unchanged(served)
    client.close()


@pytest.mark.parametrize(
    "query",
    [
        "x" * 7000,  # aiohttp refuses a request line past 8,190 bytes itself
        "a* " * 1000,
        ".*(a|b)+$ [^x]{1000} (?=a)\\1",
        "keep\x00me",
        '"keep NEAR(a b) AND OR NOT * ^ - : ( ) {} "" "',
        '"><script>alert(1)</script>',
        "\U0001f600" * 500,
    ],
)
def test_a_hostile_query_is_answered_within_bounds_as_text(served: Served, query: str) -> None:
    client, _ = logged_in(served)
    answer = client.get("/recall", params={"q": query})
    assert answer.status_code == 200, answer.text[:500]
    assert "Traceback" not in answer.text and len(answer.text) < 64_000
    assert "<script>alert(1)" not in answer.text
    if len(query) > 512:
        assert "The query was cut to its first 512 characters." in answer.text
    client.close()


def test_searches_side_by_side_all_answer(served: Served) -> None:
    client, _ = logged_in(served)

    def search(i: int) -> int:
        with httpx.Client(base_url=served.base, cookies=dict(client.cookies), timeout=60) as c:
            return c.get("/recall", params={"q": f"keep {i} " + "a* " * 200}).status_code

    with ThreadPoolExecutor(20) as threads:
        assert list(threads.map(search, range(20))) == [200] * 20
    client.close()


def test_a_query_past_the_servers_line_bound_is_refused_and_the_page_still_answers(
    served: Served,
) -> None:
    client, _ = logged_in(served)
    refused = client.get("/recall", params={"q": "x" * 20_000})
    assert 400 <= refused.status_code < 500 and "Traceback" not in refused.text
    assert client.get("/recall", params={"q": "keep"}).status_code == 200
    client.close()
