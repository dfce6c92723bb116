"""An API client's ModelOptions on the wire, both transports against the loopback fake over
HTTP; and finish_reason "length" read from plain and streamed answers alike."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

import pytest
from pydantic import SecretStr

from nanomem.config import LLMSettings
from nanomem.providers.metered import MeteredProvider
from nanomem.providers.openai_http import OpenAIHTTPProvider
from nanomem.providers.provider import ModelOptions, Provider, ProviderError, RetryingProvider
from nanomem.providers.routing import Route
from tests.conftest import TEST_KEY
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.helpers.http import TOOLS, USER, transports

Make = Callable[..., Provider]
OPTIONS = ModelOptions(
    max_tokens=77,
    temperature=0.3,
    top_p=0.9,
    stop=("END", "STOP"),
    seed=42,
    presence_penalty=0.5,
    frequency_penalty=-0.5,
    parallel_tool_calls=False,
    response_format={"type": "json_object"},
)
SENT = {
    "max_tokens": 77,
    "temperature": 0.3,
    "top_p": 0.9,
    "stop": ["END", "STOP"],
    "seed": 42,
    "presence_penalty": 0.5,
    "frequency_penalty": -0.5,
    "response_format": {"type": "json_object"},
}


@pytest.fixture(params=["direct", "litellm"])
async def make(request: pytest.FixtureRequest, fake_llm: FakeOpenAI) -> AsyncIterator[Make]:
    """Providers of one transport for the fake, wrapped as the app wraps them."""
    async with transports(request.param, fake_llm.base_url, temperature=1.0) as build:
        yield lambda: MeteredProvider(RetryingProvider(build(), 0), "openai/fake", [])


async def test_options_go_into_the_request_over_the_configured_ones(
    fake_llm: FakeOpenAI, make: Make
) -> None:
    await make().complete(USER, options=OPTIONS)
    body = fake_llm.requests[0]
    assert {key: body.get(key) for key in SENT} == SENT  # temperature 0.3 beats the config's
    assert "parallel_tool_calls" not in body  # alone, OpenAI refuses it


async def test_beside_tools_parallel_tool_calls_and_a_named_choice_go_too(
    fake_llm: FakeOpenAI, make: Make
) -> None:
    named = {"type": "function", "function": {"name": TOOLS[0]["function"]["name"]}}
    await make().complete(USER, TOOLS, tool_choice=named, options=OPTIONS)
    body = fake_llm.requests[0]
    assert body["parallel_tool_calls"] is False and body["tool_choice"] == named


async def test_without_options_nothing_new_is_sent(fake_llm: FakeOpenAI, make: Make) -> None:
    await make().complete(USER, max_tokens=50)
    body = fake_llm.requests[0]
    assert body["max_tokens"] == 50 and body["temperature"] == 1.0
    assert not {"top_p", "stop", "seed", "response_format", "parallel_tool_calls"} & set(body)


def _cut(stream: bool) -> Step:
    if stream:
        chunk = {"choices": [{"index": 0, "delta": {"content": "It was the"}}]}
        end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
        return Step.raw_events(json.dumps(chunk), json.dumps(end))
    choice = {"index": 0, "message": {"role": "assistant", "content": "It was the"}}
    return Step.raw(json.dumps({"choices": [{**choice, "finish_reason": "length"}]}))


@pytest.mark.parametrize("stream", [False, True])
async def test_finish_reason_length_is_read(fake_llm: FakeOpenAI, make: Make, stream: bool) -> None:
    fake_llm.add(_cut(stream))

    async def sink(piece: str) -> None:
        pass

    reply = await make().complete(
        USER, options=ModelOptions(max_tokens=3), on_text=sink if stream else None
    )
    assert (reply.content, reply.finish_reason) == ("It was the", "length")
    assert fake_llm.requests[0]["max_tokens"] == 3


async def test_the_client_max_tokens_takes_the_routes_field(fake_llm: FakeOpenAI) -> None:
    settings = LLMSettings(model="openai/gpt-5", api_key=SecretStr(TEST_KEY), timeout_s=10)
    path = Route(
        "direct", "test", "gpt-5", fake_llm.base_url, max_tokens_field="max_completion_tokens"
    )
    provider = OpenAIHTTPProvider(settings, path)
    try:
        await provider.complete(USER, options=ModelOptions(max_tokens=9))
    finally:
        await provider.close()
    assert (
        fake_llm.requests[0]["max_completion_tokens"] == 9
        and "max_tokens" not in fake_llm.requests[0]
    )


SCHEMA = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}


async def test_litellm_says_before_sending_that_a_model_cannot_follow_a_schema(
    fake_llm: FakeOpenAI,
) -> None:
    async with transports("litellm", fake_llm.base_url) as make:
        with pytest.raises(ProviderError) as err:
            await make().complete(USER, options=ModelOptions(response_format=SCHEMA))
    assert err.value.category == "bad_request" and "response_format" in str(err.value)
    assert fake_llm.requests == []


async def test_the_lean_client_sends_a_schema_and_reports_a_refusal_of_it(
    fake_llm: FakeOpenAI,
) -> None:
    fake_llm.error(
        400, "Invalid parameter: 'response_format' of type 'json_schema' is not supported"
    )
    async with transports("direct", fake_llm.base_url) as make:
        with pytest.raises(ProviderError) as err:
            await make().complete(USER, options=ModelOptions(response_format=SCHEMA))
    assert fake_llm.requests[0]["response_format"] == SCHEMA
    assert err.value.category == "bad_request" and "response_format" in str(err.value)
