"""OpenAIHTTPProvider against the loopback FakeOpenAI server, over real HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from pydantic import SecretStr

from nanomem.config import LLMSettings
from nanomem.providers.openai_http import OpenAIHTTPProvider, _to_reply
from nanomem.providers.provider import ProviderError, RetryingProvider, WireMessage, categorize
from tests.conftest import TEST_KEY
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import until
from tests.helpers.http import TOOLS, USER

Make = Callable[..., OpenAIHTTPProvider]


@pytest.fixture(autouse=True)
def _no_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def srv() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def make(srv: FakeOpenAI) -> AsyncIterator[Make]:
    """Build providers for `srv` (or another base URL); each is closed after the test."""
    made: list[OpenAIHTTPProvider] = []

    def build(**llm: Any) -> OpenAIHTTPProvider:
        values: dict[str, Any] = {
            "model": "openai/fake",
            "api_base": srv.base_url,
            "api_key": SecretStr(TEST_KEY),
            "timeout_s": 5,
        }
        made.append(OpenAIHTTPProvider(LLMSettings(**{**values, **llm})))
        return made[-1]

    yield build
    for provider in made:
        await provider.close()


async def failure(provider: OpenAIHTTPProvider) -> ProviderError:
    with pytest.raises(ProviderError) as err:
        await provider.complete(USER)
    return err.value


async def test_text_reply_sends_plain_model_name_and_key(srv: FakeOpenAI, make: Make) -> None:
    srv.reply("hello there")
    reply = await make(temperature=0.2).complete(USER)
    assert (reply.content, reply.tool_calls, reply.finish_reason) == ("hello there", (), "stop")
    assert srv.auth_headers == [f"Bearer {TEST_KEY}"]
    assert srv.requests == [
        {"model": "fake", "messages": USER, "max_tokens": 4096, "temperature": 0.2}
    ]


async def test_max_tokens_argument_and_no_key(srv: FakeOpenAI, make: Make) -> None:
    # A local server may need no key: nothing is refused, no Authorization is sent.
    await make(api_key=None, model="local-model").complete(USER, max_tokens=50)
    assert srv.auth_headers == [None]
    assert srv.requests[0]["model"] == "local-model"
    assert srv.requests[0]["max_tokens"] == 50


async def test_key_falls_back_to_openai_api_key(
    srv: FakeOpenAI, make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    await make(api_key=None).complete(USER)
    assert srv.auth_headers == ["Bearer sk-from-env"]


async def test_a_pasted_key_is_used_without_its_line_break(srv: FakeOpenAI, make: Make) -> None:
    await make(api_key=f"  {TEST_KEY}\n").complete(USER)
    assert srv.auth_headers == [f"Bearer {TEST_KEY}"]


async def test_a_key_that_cannot_be_a_header_is_an_auth_error_never_retried(
    srv: FakeOpenAI, make: Make
) -> None:
    provider = RetryingProvider(make(api_key="sk-pasted\u2013dash"), max_retries=2)
    with pytest.raises(ProviderError) as err:
        await provider.complete(USER)
    assert err.value.category == "auth" and err.value.attempts == 1
    assert "API key" in err.value.detail and srv.requests == []


async def test_missing_key_for_openai_is_refused_without_a_request(make: Make) -> None:
    err = await failure(make(api_key=None, api_base=None))
    assert err.category == "auth"
    assert "Missing credentials" in err.detail


async def test_tool_call_round_trip(srv: FakeOpenAI, make: Make) -> None:
    provider = make()
    srv.tool_call("get_weather", {"city": "Oslo"}, call_id="call_abc")
    srv.reply("It is sunny in Oslo.")
    first = await provider.complete(USER, TOOLS)
    assert first.finish_reason == "tool_calls"
    (call,) = first.tool_calls
    assert (call.id, call.name, call.arguments) == ("call_abc", "get_weather", '{"city": "Oslo"}')
    history = [
        *USER,
        first.as_message(),
        {"role": "tool", "tool_call_id": "call_abc", "content": "sunny"},
    ]
    second = await provider.complete(history, TOOLS)
    assert second.content == "It is sunny in Oslo."
    assert srv.requests[0]["tools"] == TOOLS
    assert srv.requests[1]["messages"] == history


async def test_each_call_sends_the_tools_it_is_given(srv: FakeOpenAI, make: Make) -> None:
    # The encoding of a tool list is kept for the next call with that same list, never reused
    # for another one (a tool added, say, comes as a new list).
    provider = make()
    more = [*TOOLS, {**TOOLS[0], "function": {**TOOLS[0]["function"], "name": "get_time"}}]
    for tools in (TOOLS, TOOLS, more, TOOLS, None):
        await provider.complete(USER, tools)
    sent = [request.get("tools") for request in srv.requests]
    assert sent == [TOOLS, TOOLS, more, TOOLS, None]


async def test_malformed_arguments_pass_through_verbatim(srv: FakeOpenAI, make: Make) -> None:
    srv.tool_call("get_weather", '{"city": "Osl', text="let me check")
    reply = await make().complete(USER, TOOLS)
    assert reply.content == "let me check"
    assert reply.tool_calls[0].arguments == '{"city": "Osl'


async def test_several_tool_calls(srv: FakeOpenAI, make: Make) -> None:
    srv.tool_calls([("get_weather", {"city": "Oslo"}), ("get_weather", "{bad")])
    reply = await make().complete(USER, TOOLS)
    assert [c.arguments for c in reply.tool_calls] == ['{"city": "Oslo"}', "{bad"]
    assert len({c.id for c in reply.tool_calls}) == 2


async def test_usage_is_parsed(srv: FakeOpenAI, make: Make) -> None:
    srv.reply("x", usage={"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10})
    reply = await make().complete(USER)
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (7, 3)


@pytest.mark.parametrize(
    ("status", "message", "category"),
    [
        (429, "slow down", "rate_limited"),
        (429, "You exceeded your current quota: insufficient_quota", "quota"),
        (401, "Incorrect API key provided", "auth"),
        (403, "forbidden", "auth"),
        (404, "no such model", "not_found"),
        (400, "This model's maximum context length is 8192 tokens", "context_too_long"),
        (400, "unknown parameter", "bad_request"),
        (500, "boom", "server"),
        (503, "overloaded", "server"),
    ],
)
async def test_http_errors_are_categorised(
    srv: FakeOpenAI, make: Make, status: int, message: str, category: str
) -> None:
    srv.error(status, message)
    err = await failure(make())
    assert (err.category, err.status) == (category, status)
    assert message in err.detail
    assert err.retry_after is None


async def test_retry_after_is_read(srv: FakeOpenAI, make: Make) -> None:
    srv.error(429, "slow down", retry_after=2)
    err = await failure(make())
    assert (err.category, err.retry_after) == ("rate_limited", 2.0)


@pytest.mark.parametrize(
    ("status", "body", "category"),
    [  # litellm's own exception mapping, beyond status codes
        (400, "the request exceeds the available context size", "context_too_long"),
        (400, "Rate limit reached for requests", "rate_limited"),
        (503, "rate_limit: check your plan and billing details", "quota"),
        (504, "gateway timeout", "timeout"),
        (408, "request timeout", "timeout"),
        (500, "upstream connect error", "unreachable"),
        (502, "upstream connect error", "server"),
        (409, "conflict", "server"),
        (422, "unprocessable", "bad_request"),
        (400, '{"type": "invalid_request_error", "code": "model_not_found"}', "not_found"),
    ],
)
def test_categorize_mirrors_litellm(status: int, body: str, category: str) -> None:
    assert categorize(status, body) == category


async def test_hang_times_out(srv: FakeOpenAI, make: Make) -> None:
    srv.hang(3600)  # never answers: the client's own timeout must end the call
    err = await asyncio.wait_for(failure(make(timeout_s=0.5)), 60)
    assert (err.category, err.status) == ("timeout", 408)


async def test_refused_port_is_unreachable(make: Make) -> None:
    err = await failure(make(api_base="http://127.0.0.1:9/v1"))
    assert err.category == "unreachable"


async def test_empty_reply(srv: FakeOpenAI, make: Make) -> None:
    srv.reply("  ")
    assert (await failure(make())).category == "empty"


def test_missing_ids_and_malformed_bodies() -> None:
    body = b'{"choices": [{"message": {"tool_calls": [{"function": {"name": "f"}}]}}]}'
    reply = _to_reply(body)
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [("call_0", "f", "{}")]
    assert (reply.content, reply.usage, reply.finish_reason) == (None, None, None)
    bodies = {
        b"<html>oops</html>": "malformed",
        b"{}": "malformed",
        b'{"choices": []}': "malformed",
        b'{"choices": [{"index": 0}]}': "malformed",  # no message
        b"[1]": "malformed",
        b"\xff\xfe": "malformed",
    }
    for raw, category in bodies.items():
        with pytest.raises(ProviderError) as err:
            _to_reply(raw)
        assert (err.value.category, err.value.retryable) == (category, True)
        assert err.value.detail.startswith("malformed response")


async def test_composes_with_retrying_provider(srv: FakeOpenAI, make: Make) -> None:
    srv.error(500)
    srv.error(500)
    srv.reply("third time lucky")
    reply = await RetryingProvider(make(), max_retries=2, base_delay=0.01).complete(USER)
    assert reply.content == "third time lucky"
    assert len(srv.requests) == 3


async def test_api_key_never_appears_in_errors(srv: FakeOpenAI, make: Make) -> None:
    provider = make(timeout_s=0.5)
    srv.error(401, f"Incorrect API key provided: {TEST_KEY}")
    srv.error(400, f"you sent Authorization: Bearer {TEST_KEY}")
    srv.error(429, "slow", retry_after=1)
    srv.hang(3600)
    errors = [await failure(provider) for _ in range(4)]
    errors.append(await failure(make(api_base="http://127.0.0.1:9/v1")))
    categories = ["auth", "bad_request", "rate_limited", "timeout", "unreachable"]
    assert [e.category for e in errors] == categories
    for err in errors:
        assert TEST_KEY not in f"{err} {err!r} {err.detail}"


async def test_concurrent_calls_share_one_session() -> None:
    with FakeOpenAI() as srv:
        for _ in range(100):
            srv.reply("held", hold_after=0)
        provider = OpenAIHTTPProvider(
            LLMSettings(model="openai/fake", api_base=srv.base_url, api_key=SecretStr(TEST_KEY))
        )
        sessions: set[int] = set()
        make_session = provider._client

        def spy() -> Any:
            session = make_session()
            sessions.add(id(session))
            return session

        provider._client = spy  # type: ignore[method-assign]

        async def shown(text: str) -> None:
            pass

        calls = asyncio.gather(
            *(
                provider.complete([{"role": "user", "content": f"m{i}"}], on_text=shown)
                for i in range(100)
            )
        )
        await until(lambda: srv.held == 100)  # all hundred are in the server at once
        srv.release()
        replies = await asyncio.wait_for(calls, 60)
        asked = sorted(str(r["messages"][-1]["content"]) for r in srv.requests)
        await provider.close()
    assert [r.content for r in replies] == ["held"] * 100
    assert asked == sorted(f"m{i}" for i in range(100))
    assert len(sessions) == 1


# The first session cannot be closed once its loop is gone: that is the point of the test.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_a_new_event_loop_gets_a_new_session(srv: FakeOpenAI) -> None:
    provider = OpenAIHTTPProvider(LLMSettings(model="fake", api_base=srv.base_url))

    async def call(close: bool) -> Any:
        await provider.complete(USER)
        session = provider._session
        if close:
            await provider.close()
        return session

    first = asyncio.run(call(close=False))
    second = asyncio.run(call(close=True))  # the first session's loop is closed by now
    assert first is not second
    assert second is not None and second.closed
    assert len(srv.requests) == 2


async def test_shared_and_fresh_messages_arrive_exactly(srv: FakeOpenAI, make: Make) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    shared = [
        WireMessage(role="user", content='héllo ✓ "quoted"\nline'),
        WireMessage(role="assistant", content=None, tool_calls=[call]),
        WireMessage(role="tool", tool_call_id="c1", name="f", content="ok"),
    ]
    sent = [{"role": "system", "content": "sys"}, *shared, {"role": "user", "content": "now"}]
    provider = make()
    for _ in range(2):  # the second request reuses the shared messages' encodings
        srv.reply("fine")
        await provider.complete(sent)
    assert [request["messages"] for request in srv.requests] == [sent, sent]
