"""Slack's Events API over HTTP (`slack.mode = "http"`): the real gateway serves
/slack/events on its own server, and takes only what carries Slack's v0 signature over this
body, made with slack.signing_secret within 5 minutes. A forged or stale request is refused
with 401 and nothing of it is stored or answered."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes.openai_server import FakeOpenAI, Step
from tests.fakes.slack_server import SIGNING_SECRET, FakeSlack, signed
from tests.helpers import wait_until
from tests.helpers.gateway import GatewayProcess, onboarded
from tests.helpers.slack import DM, OWNER, reply_count, slack_fake, slack_gateway

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[FakeSlack, FakeOpenAI, GatewayProcess]]:
    home = onboarded(tmp_path_factory, "slack-http")
    fake = slack_fake()
    with FakeOpenAI() as llm:
        llm.set_fallback(lambda request: Step.reply("answered over http"))
        with slack_gateway(home, fake, llm, NANOMEM_SLACK__MODE="http") as gateway:
            yield fake, llm, gateway
    fake.stop()


def post(gateway: GatewayProcess, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    url = f"http://127.0.0.1:{gateway.port}/slack/events"
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def event(fake: FakeSlack, text: str) -> bytes:
    return json.dumps(fake.event_payload(fake.message_event(DM, OWNER, text))).encode()


def test_the_url_verification_challenge_is_answered_when_signed(served: Any) -> None:
    _fake, _, gateway = served
    body = json.dumps({"type": "url_verification", "challenge": "c-123", "token": "t"}).encode()
    assert post(gateway, body, signed(SIGNING_SECRET, body))[1].find("c-123") >= 0
    status, said = post(gateway, body, signed("not-the-secret", body))
    assert status == 401 and "c-123" not in said


def test_a_signed_event_is_stored_answered_and_a_retry_answered_once(served: Any) -> None:
    fake, llm, gateway = served
    asked = len(llm.requests)
    body = event(fake, "over http")
    assert post(gateway, body, signed(SIGNING_SECRET, body))[0] == 200
    wait_until(lambda: reply_count(fake, DM, "answered over http"), what="the reply")
    retry = signed(SIGNING_SECRET, body) | {
        "X-Slack-Retry-Num": "1",
        "X-Slack-Retry-Reason": "http_timeout",
    }
    assert post(gateway, body, retry)[0] == 200
    follow = event(fake, "next")
    post(gateway, follow, signed(SIGNING_SECRET, follow))
    wait_until(lambda: reply_count(fake, DM, "answered over http") == 2, what="the next reply")
    assert len(llm.requests) == asked + 2  # the retry was not a third turn


@pytest.mark.parametrize(
    "forgery",
    ["wrong-secret", "stale-6-minutes", "future-6-minutes", "no-signature", "body-changed"],
)
def test_a_forged_or_stale_request_is_refused_and_nothing_stored(served: Any, forgery: str) -> None:
    fake, llm, gateway = served
    asked, before = len(llm.requests), len(fake.posted)
    body = event(fake, f"forged {forgery}")
    headers = {
        "wrong-secret": signed("guessed-secret", body),
        "stale-6-minutes": signed(SIGNING_SECRET, body, int(time.time()) - 360),
        "future-6-minutes": signed(SIGNING_SECRET, body, int(time.time()) + 360),
        "no-signature": {"Content-Type": "application/json"},
        "body-changed": signed(SIGNING_SECRET, event(fake, "what was signed")),
    }[forgery]
    status, _ = post(gateway, body, headers)
    assert status == 401
    # A genuine message after it is answered, and it alone: the forgery never reached the inbox.
    genuine = event(fake, "genuine after forgery")
    post(gateway, genuine, signed(SIGNING_SECRET, genuine))
    wait_until(lambda: len(fake.posted) > before, what="the genuine message's reply")
    assert len(llm.requests) == asked + 1
    said = json.dumps(llm.requests[-1])
    assert "forged" not in said and "genuine after forgery" in said


def test_a_signed_slash_command_and_press_over_http_are_answered(served: Any) -> None:
    """Slack posts these form-encoded (a press as `payload=<json>`); signed, each is taken."""
    import urllib.parse

    fake, llm, gateway = served
    asked = len(llm.requests)
    fields = {
        "command": "/nanomem",
        "text": "help",
        "channel_id": DM,
        "channel_name": "directmessage",
    }
    fields |= {"user_id": OWNER, "trigger_id": "trig-http-1", "team_id": "T0000TEAM"}
    body = urllib.parse.urlencode(fields).encode()
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    status, _ = post(gateway, body, signed(SIGNING_SECRET, body) | form)
    assert status == 200
    wait_until(lambda: reply_count(fake, DM, "/nanomem"), what="the help, spelled for Slack")
    message = {"channel": DM, "ts": "1700000000.000200", "text": "pick", "thread_ts": None}
    button = {"type": "button", "action_id": "nanomem-0", "value": "/help"}
    message["blocks"] = [{"type": "actions", "elements": [button | {"text": {"text": "Help"}}]}]
    before = reply_count(fake, DM, "/nanomem")
    press = fake.press(message, "Help", OWNER).payload  # the payload only: sent over HTTP here
    body = urllib.parse.urlencode({"payload": json.dumps(press)}).encode()
    assert post(gateway, body, signed("forged", body) | form)[0] == 401
    assert post(gateway, body, signed(SIGNING_SECRET, body) | form)[0] == 200
    wait_until(lambda: reply_count(fake, DM, "/nanomem") > before, what="the press's answer")
    assert len(llm.requests) == asked  # commands: no model turn


@pytest.mark.parametrize("signature", ["unsigned", "signed"])
@pytest.mark.parametrize("form", ["json", "form"])
def test_a_body_nested_too_deeply_is_refused_without_a_traceback(
    served: Any, signature: str, form: str
) -> None:
    """Bolt reads the body before it checks the signature, and Python's json gives up on deep
    nesting with a RecursionError: anyone who can reach the port would otherwise put a
    traceback in the log with each post. Refused plainly, and the channel answers on."""
    import urllib.parse

    fake, llm, gateway = served
    asked, lines = len(llm.requests), len(gateway.lines)
    nested = "[" * 100_000 + "]" * 100_000
    if form == "json":
        body, kind = nested.encode(), "application/json"
    else:
        body = urllib.parse.urlencode({"payload": nested}).encode()
        kind = "application/x-www-form-urlencoded"
    headers = {"Content-Type": kind}
    if signature == "signed":
        headers |= signed(SIGNING_SECRET, body)
    status, said = post(gateway, body, headers)
    assert status in (400, 401) and "Traceback" not in said and "Recursion" not in said
    genuine = event(fake, f"genuine after nesting {signature} {form}")
    post(gateway, genuine, signed(SIGNING_SECRET, genuine))
    wait_until(lambda: len(llm.requests) == asked + 1, what="the genuine message's turn")
    logged = "\n".join(gateway.lines[lines:])
    assert "Traceback" not in logged and "RecursionError" not in logged
