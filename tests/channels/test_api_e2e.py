"""The agent API end to end: the real `openai` client against `nanomem gateway` in a subprocess
(Telegram beside it, on the loopback Bot API), litellm against the loopback model server."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import threading
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from nanomem.home import Home
from tests.conftest import NANOMEM, cli_env, run_cli
from tests.fakes.openai_server import FakeOpenAI, Step, echo_step
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import wait_until
from tests.helpers.gateway import (
    API_KEY,
    GatewayProcess,
    load_session,
    onboarded,
    post,
    texts,
    user_texts,
)
from tests.helpers.loopback import loopback

# Longer than the secrets the stream holds back (a secret is never shown in part).
LOOKING = "Let me look in the workspace first, then I will answer your question properly."


def scripted(request: dict[str, Any]) -> Step:
    """By a keyword in the last user message; tests share one model server."""
    last = user_texts(request)[-1]
    if "HOLD" in last:
        if any(m.get("role") == "tool" for m in request["messages"]):
            return Step.reply("the held answer", latency=30)
        return Step.tool_call("list_dir", {"path": "."}, text=LOOKING)
    if "FAIL" in last:
        return Step.error(401, "invalid api key upstream")
    return echo_step(request)


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[FakeTelegram, FakeOpenAI]]:
    with loopback(scripted) as both:
        yield both


@pytest.fixture(scope="module")
def gateway(
    servers: tuple[FakeTelegram, FakeOpenAI], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    home = onboarded(tmp_path_factory, "api")
    with GatewayProcess(
        home,
        *servers,
        NANOMEM_GATEWAY__GRACE_S="3",
        NANOMEM_API__ENABLED="true",
        NANOMEM_API__KEYS=json.dumps([API_KEY]),
        NANOMEM_API__MAX_BODY_MB="1",
        NANOMEM_LLM__TIMEOUT_S="120",  # the held answer must not time out during a test
    ) as process:
        process.wait_for_line(r"api: running")
        yield process


@pytest.fixture
def llm(servers: tuple[FakeTelegram, FakeOpenAI]) -> FakeOpenAI:
    return servers[1]


def client(gateway: GatewayProcess, key: str | None = API_KEY) -> openai.OpenAI:
    base = f"http://127.0.0.1:{gateway.port}/v1"
    return openai.OpenAI(base_url=base, api_key=key or "", max_retries=0, timeout=60)


def ask(gateway: GatewayProcess, text: str, session: str, **extra: Any) -> str:
    reply = client(gateway).chat.completions.create(
        model="nanomem",
        messages=[{"role": "user", "content": text}],
        extra_body={"session_id": session},
        **extra,
    )
    return reply.choices[0].message.content or ""


def asked(llm: FakeOpenAI, word: str) -> list[dict[str, Any]]:
    return [r for r in llm.requests if word in user_texts(r)[-1]]


def test_a_plain_completion_is_the_agents_answer(gateway: GatewayProcess, llm: FakeOpenAI) -> None:
    answer = ask(gateway, "hello api", "plain")
    assert answer.startswith("echo: ") and answer.endswith("hello api")
    assert "channel api" in asked(llm, "hello api")[0]["messages"][-1]["content"]
    saved = load_session(gateway.home, "api:plain").messages
    assert [m["role"] for m in saved] == ["user", "assistant"]


def test_a_streamed_completion_arrives_in_pieces_with_usage(gateway: GatewayProcess) -> None:
    stream = client(gateway).chat.completions.create(
        model="nanomem",
        messages=[{"role": "user", "content": "stream this reply please"}],
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"session_id": "streamed"},
    )
    chunks = list(stream)
    pieces = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert len(pieces) >= 2
    assert "".join(pieces).startswith("echo: ") and "".join(pieces).endswith("reply please")
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_sessions_continue_per_session_id_and_stay_apart(
    gateway: GatewayProcess, llm: FakeOpenAI
) -> None:
    ask(gateway, "my colour is teal", "alice")
    ask(gateway, "which colour for alice", "alice")
    ask(gateway, "which colour for bob", "bob")
    (alice,) = asked(llm, "which colour for alice")
    (bob,) = asked(llm, "which colour for bob")
    assert any("teal" in text for text in user_texts(alice)[:-1])
    assert not any("teal" in text for text in user_texts(bob))
    reply = client(gateway).chat.completions.create(
        model="x", messages=[{"role": "user", "content": "by user field"}], user="carol"
    )
    assert reply.choices[0].message.content
    assert load_session(gateway.home, "api:carol").messages


def test_new_starts_a_fresh_session(gateway: GatewayProcess, llm: FakeOpenAI) -> None:
    ask(gateway, "remember the blue door", "renew")
    assert ask(gateway, "/new", "renew").startswith("New session started.")
    ask(gateway, "what now", "renew")
    (fresh,) = asked(llm, "what now")
    assert not any("blue door" in text for text in user_texts(fresh))


def test_a_missing_or_wrong_key_is_refused_before_the_model(
    gateway: GatewayProcess, llm: FakeOpenAI
) -> None:
    before = len(llm.requests)
    with pytest.raises(openai.AuthenticationError) as refused:
        client(gateway, "nm-wrong-key").chat.completions.create(
            model="nanomem", messages=[{"role": "user", "content": "let me in"}]
        )
    assert refused.value.status_code == 401 and refused.value.code == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        client(gateway, "nm-wrong-key").models.list()
    body = b'{"messages": [{"role": "user", "content": "let me in"}]}'
    for key in (None, "", "nm-wrong-key"):
        status, error = post(gateway, body, key)
        assert status == 401 and error["error"]["code"] == "invalid_api_key"
        assert post(gateway, None, key, path="models")[0] == 401
    assert len(llm.requests) == before
    assert not any("let me in" in json.dumps(r) for r in llm.requests)


def test_models_lists_the_agent(gateway: GatewayProcess) -> None:
    assert [m.id for m in client(gateway).models.list()] == ["nanomem"]


def test_bad_requests_get_openai_errors_and_never_reach_the_model(
    gateway: GatewayProcess, llm: FakeOpenAI
) -> None:
    before = len(llm.requests)
    with pytest.raises(openai.BadRequestError, match="last message must be the user"):
        client(gateway).chat.completions.create(
            model="nanomem",
            messages=[
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
            ],
        )
    cases = [
        (b"{not json", 400, "not valid JSON"),
        (b'{"messages": []}', 400, "non-empty list"),
        (b'{"messages": [{"role": "user", "content": "  "}]}', 400, "empty"),
        (
            b'{"session_id": "-100", "messages": [{"role": "user", "content": "group?"}]}',
            400,
            "session_id",
        ),
        (b'{"messages": [{"role": "user", "content": "' + b"x" * 1_100_000 + b'"}]}', 413, "MB"),
    ]
    for body, status, words in cases:
        got, error = post(gateway, body)
        assert got == status, (body[:60], error)
        assert words in error["error"]["message"] and error["error"]["type"]
    assert len(llm.requests) == before


def test_a_model_error_is_a_short_categorised_openai_error(gateway: GatewayProcess) -> None:
    with pytest.raises(openai.InternalServerError) as failed:
        ask(gateway, "FAIL now", "failing")
    assert failed.value.status_code == 502
    assert "refused the API key" in failed.value.message
    assert "Traceback" not in failed.value.message


def test_the_sdks_retries_after_a_model_failure_save_the_message_once(
    gateway: GatewayProcess, llm: FakeOpenAI
) -> None:
    # The model fails past nanomem's own retries (llm.max_retries: 3), so the client gets a
    # 502; the SDK asks again (max_retries 2, its default) and the model answers that time.
    for _ in range(4):
        llm.add(Step.error(500, "upstream hiccup", retry_after=0))
    sdk = openai.OpenAI(base_url=f"http://127.0.0.1:{gateway.port}/v1", api_key=API_KEY)
    reply = sdk.chat.completions.create(
        model="nanomem",
        messages=[{"role": "user", "content": "are you there after a hiccup"}],
        extra_body={"session_id": "flaky"},
    )
    assert (reply.choices[0].message.content or "").endswith("are you there after a hiccup")
    saved = load_session(gateway.home, "api:flaky").messages
    assert [m["role"] for m in saved].count("user") == 1, saved
    assert (
        saved[-1]["role"] == "assistant"
        and saved[-1]["content"] == reply.choices[0].message.content
    )


def test_a_client_that_hangs_up_mid_stream_stops_the_turn(
    gateway: GatewayProcess, llm: FakeOpenAI
) -> None:
    stream = client(gateway).chat.completions.create(
        model="nanomem",
        messages=[{"role": "user", "content": "HOLD on"}],
        stream=True,
        extra_body={"session_id": "hangup"},
    )
    seen = ""
    for piece in stream:
        seen += (piece.choices[0].delta.content or "") if piece.choices else ""
        if "Let me look" in seen:
            break
    wait_until(lambda: len(asked(llm, "HOLD on")) == 2, what="the held second model call")
    assert [m["role"] for m in load_session(gateway.home, "api:hangup").messages] == ["user"]
    stream.close()

    def saved() -> list[dict[str, Any]]:
        messages = load_session(gateway.home, "api:hangup").messages
        return messages if len(messages) > 1 else []

    # Without the stop, nothing but the user's message is saved until the held answer (30 s).
    messages = wait_until(saved, timeout=20, what="the stopped turn to be saved")
    assert messages[1]["role"] == "assistant" and messages[1]["content"] == LOOKING
    assert messages[2]["role"] == "tool"
    assert not any("the held answer" in str(m.get("content")) for m in messages)
    # The session goes on at once.
    assert ask(gateway, "are you there", "hangup").endswith("are you there")


def test_telegram_and_the_api_are_served_together(
    gateway: GatewayProcess, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    telegram = servers[0]
    answers: list[str] = []
    thread = threading.Thread(target=lambda: answers.append(ask(gateway, "via api", "both")))
    thread.start()
    telegram.send_text(1001, "via telegram")
    (reply,) = telegram.wait_for_messages(1001, 1)
    thread.join(30)
    assert reply["text"].endswith("via telegram") and answers[0].endswith("via api")
    status, body = gateway.health()
    assert status == 200
    assert {name: c["state"] for name, c in body["channels"].items()} == {
        "telegram": "up",
        "api": "up",
        "cli": "up",  # what terminal chats left for later (their reminders)
    }
    assert texts(telegram.sent_messages(1001)) == [reply["text"]]
    log = (gateway.home.logs / "nanomem.log").read_text() + "".join(gateway.lines)
    assert API_KEY not in log


def test_keys_emptied_by_the_environment_are_refused(home: Home) -> None:
    env = cli_env(
        home,
        None,
        NANOMEM_LLM__MODEL="openai/fake",
        NANOMEM_API__ENABLED="true",
        NANOMEM_API__KEYS="[]",
        NANOMEM_GATEWAY__HOST="0.0.0.0",
    )
    before = home.config.read_text()
    result = run_cli("gateway", env=env)
    assert result.returncode == 2
    said, refused, hint = result.stderr.strip().splitlines()
    assert "NANOMEM_API__KEYS lists no key" in said and "api.keys is empty" in refused
    assert "`nanomem doctor` checks the whole setup" in hint
    assert (
        "Traceback" not in result.stderr and home.config.read_text() == before
    )  # the variable would hide a key written there


def test_keys_from_the_environment_are_used_and_never_written(home: Home) -> None:
    with FakeOpenAI() as llm:
        env = cli_env(home, llm, NANOMEM_API__ENABLED="true", NANOMEM_API__KEYS=f'["{API_KEY}"]')
        before = home.config.read_text()
        with gateway_on(env) as (port, lines):
            assert answered(port, API_KEY) == 200
        assert home.config.read_text() == before
        assert not any("api.keys" in line for line in lines)


def test_the_gateway_runs_with_only_the_api_and_makes_its_key(home: Home, tmp_path: Path) -> None:
    comments = [line for line in home.config.read_text().splitlines() if line.startswith("#")]
    with FakeOpenAI() as llm:
        env = cli_env(home, llm, NANOMEM_API__ENABLED="true")
        with gateway_on(env) as (port, lines):
            key = tomllib.loads(home.config.read_text())["api"]["keys"][0]
            assert len(key) >= 32
            base = f"http://127.0.0.1:{port}/v1"
            api = openai.OpenAI(base_url=base, api_key=key, max_retries=3)
            reply = api.chat.completions.create(
                model="nanomem", messages=[{"role": "user", "content": "only the api"}]
            )
            assert (reply.choices[0].message.content or "").endswith("only the api")
            assert answered(port, None) == 401 and answered(port, "x" * 43) == 401
    told = [line for line in lines if "api.keys" in line]
    assert len(told) == 1 and str(home.config) in told[0]
    assert home.config.stat().st_mode & 0o777 == 0o600
    # Only the one commented-out line became the key: every other comment is kept.
    kept = [line for line in home.config.read_text().splitlines() if line.startswith("#")]
    assert [line for line in comments if line not in kept] == ["# keys = []"]
    log = (home.logs / "nanomem.log").read_text() + "".join(lines)
    assert key not in log
    status = run_cli("status", env=env).stdout
    assert key not in status and f"enabled, 1 key (***{key[-4:]})" in status
    with gateway_on(env) as (port, lines):  # kept: the next start makes no other
        assert answered(port, key) == 200
    assert tomllib.loads(home.config.read_text())["api"]["keys"] == [key]


@contextlib.contextmanager
def gateway_on(env: dict[str, str]) -> Iterator[tuple[int, list[str]]]:
    """`nanomem gateway` running (its port), and the lines it wrote to stderr until it was up."""
    env = {**env, "NANOMEM_GATEWAY__PORT": "0"}
    proc = subprocess.Popen([*NANOMEM, "gateway"], env=env, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        port = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            lines.append(line)
            if found := re.search(r"health at http://[\d.]+:(\d+)/health", line):
                port = int(found.group(1))
            if "api: running" in line or not line:
                break
        assert port is not None, "".join(lines)
        yield port, lines
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


def answered(port: int, key: str | None) -> int:
    """The status of GET /v1/models with this key (None: no Authorization header)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models")
    if key is not None:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
