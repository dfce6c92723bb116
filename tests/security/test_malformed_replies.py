"""A model reply that is HTTP 200 but not a chat completion (found by a fuzz pass: "The model
service had an internal error"). Both transports, streamed and whole, from the loopback model
server: the call fails as "malformed" (retried, as a transient fault may be), the person is told
the answer was malformed, the log has one line of detail, and no words are stored as the
assistant's."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from pydantic import SecretStr

from nanomem.config import LLMSettings
from nanomem.home import Home
from nanomem.providers.litellm_provider import LiteLLMProvider
from nanomem.providers.openai_http import OpenAIHTTPProvider
from nanomem.providers.provider import Provider, ProviderError, RetryingProvider
from tests.conftest import TEST_KEY, cli_env, run_cli
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.http import USER

HEAD = '"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "fake"'
WHOLE = {
    "role-null": f'{{{HEAD}, "choices": [{{"index": 0, "message": {{"role": null}}}}]}}',
    "empty-choice": f'{{{HEAD}, "choices": [{{}}]}}',
    "no-choices": f'{{{HEAD}, "choices": []}}',
    "no-message": f'{{{HEAD}, "choices": [{{"index": 0, "finish_reason": "stop"}}]}}',
    "content-number": f'{{{HEAD}, "choices": [{{"message": {{"content": 5}}}}]}}',
    "choices-object": f'{{{HEAD}, "choices": {{"0": "hi"}}}}',
    "not-json": "<html>upstream says hello</html>",
}
CHUNK = '"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "fake"'
STREAMED = {
    "choice-number": [f'{{{CHUNK}, "choices": [5]}}'],
    "delta-string": [f'{{{CHUNK}, "choices": [{{"index": 0, "delta": "hi"}}]}}'],
    "content-number": [f'{{{CHUNK}, "choices": [{{"index": 0, "delta": {{"content": 5}}}}]}}'],
    "not-json": ["{not json"],
}


@pytest.fixture
def srv() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(params=["direct", "litellm"])
async def provider(request: pytest.FixtureRequest, srv: FakeOpenAI) -> AsyncIterator[Provider]:
    settings = LLMSettings(
        model="openai/fake",
        api_base=srv.base_url,
        api_key=SecretStr(TEST_KEY),
        timeout_s=10,
        transport=request.param,
    )
    if request.param == "litellm":
        yield LiteLLMProvider(settings)
        return
    lean = OpenAIHTTPProvider(settings)
    yield lean
    await lean.close()


async def ignore(_: str) -> None:
    return None


# litellm mends these itself before nanomem sees them (a null role becomes "assistant", a
# chunk it cannot read is skipped): what is left is a reply without words, "empty".
MENDED_BY_LITELLM = {"role-null", "stream-content-number", "stream-not-json"}


def expected(provider: Provider, case: str) -> str:
    mended = isinstance(provider, LiteLLMProvider) and case in MENDED_BY_LITELLM
    return "empty" if mended else "malformed"


@pytest.mark.parametrize("case", WHOLE)
async def test_a_malformed_whole_reply_is_malformed(
    srv: FakeOpenAI, provider: Provider, case: str
) -> None:
    srv.raw(WHOLE[case])
    with pytest.raises(ProviderError) as failed:
        await provider.complete(USER)
    assert (failed.value.category, failed.value.retryable) == (expected(provider, case), True)


async def test_an_answer_that_is_not_json_is_malformed_on_litellms_sdk_path_too(
    srv: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A person may switch litellm back to the OpenAI SDK's path, which calls an answer that is
    # not JSON a server error (500): the JSON error it ran into says what it was.
    monkeypatch.setenv("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", "False")
    settings = LLMSettings(
        model="openai/fake", api_base=srv.base_url, api_key=SecretStr(TEST_KEY), timeout_s=10
    )
    srv.raw(WHOLE["not-json"])
    with pytest.raises(ProviderError) as failed:
        await LiteLLMProvider(settings.model_copy(update={"transport": "litellm"})).complete(USER)
    assert (failed.value.category, failed.value.status) == ("malformed", 500)


@pytest.mark.parametrize("case", STREAMED)
async def test_a_malformed_stream_is_malformed(
    srv: FakeOpenAI, provider: Provider, case: str
) -> None:
    srv.raw_events(*STREAMED[case])
    with pytest.raises(ProviderError) as failed:
        await provider.complete(USER, on_text=ignore)
    assert failed.value.category == expected(provider, f"stream-{case}")


async def test_a_malformed_reply_is_retried_and_a_good_one_after_it_stands(
    srv: FakeOpenAI, provider: Provider
) -> None:
    srv.raw(WHOLE["role-null"])
    srv.reply("better now")
    reply = await RetryingProvider(provider, 2, base_delay=0.01).complete(USER)
    assert reply.content == "better now"
    assert len(srv.requests) == 2


def session_messages(home: Home) -> list[dict[str, Any]]:
    (path,) = home.sessions.glob("*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()[1:]]


@pytest.mark.parametrize("body", [WHOLE["role-null"], WHOLE["empty-choice"]], ids=["role", "{}"])
def test_the_person_is_told_the_answer_was_malformed(
    srv: FakeOpenAI, home: Home, body: str
) -> None:
    for _ in range(2):  # the first answer and its one retry
        srv.raw(body)
    env = cli_env(home, srv, NANOMEM_LLM__MAX_RETRIES="1", NANOMEM_LLM__TRANSPORT="direct")
    done = run_cli("chat", "-m", "hello?", env=env, timeout=60)
    assert "The model's answer was malformed" in done.stdout + done.stderr
    assert "internal error" not in done.stdout + done.stderr
    assert len(srv.requests) == 2
    assistant = [m for m in session_messages(home) if m.get("role") == "assistant"]
    assert [m.get("failed") for m in assistant] == ["malformed"]  # a marker, not the model's words
    log = "\n".join(path.read_text() for path in home.logs.glob("*.log"))
    assert len([line for line in log.splitlines() if "failed after 2 attempts" in line]) == 1
    assert "malformed" in log
