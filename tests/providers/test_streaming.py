"""Both transports (the lean client and litellm) streaming from the loopback fake over HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
from pydantic import SecretStr

from nanomem.config import LLMSettings
from nanomem.providers.openai_http import OpenAIHTTPProvider
from nanomem.providers.provider import Provider, ProviderError, RetryingProvider
from nanomem.providers.routing import Route
from tests.conftest import TEST_KEY
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.helpers.http import TOOLS, USER, transports

Make = Callable[..., Provider]


@pytest.fixture(params=["direct", "litellm"])
async def make(request: pytest.FixtureRequest, fake_llm: FakeOpenAI) -> AsyncIterator[Make]:
    async with transports(request.param, fake_llm.base_url) as build:
        yield build


class Sink:
    """Records each piece, and whether the server had finished its stream when it came."""

    def __init__(self, fake_llm: FakeOpenAI, release_after: int | None = None) -> None:
        self.fake_llm = fake_llm
        self.release_after = release_after
        self.pieces: list[str] = []
        self.before_end: list[str] = []

    async def __call__(self, piece: str) -> None:
        self.pieces.append(piece)
        if self.fake_llm.streams_finished == 0:
            self.before_end.append(piece)
        if len(self.pieces) == self.release_after:
            self.fake_llm.release()


async def test_pieces_arrive_in_order_before_the_reply_ends(
    fake_llm: FakeOpenAI, make: Make
) -> None:
    # The server holds the stream after three chunks until the client has shown two pieces:
    # a client that waited for the whole reply would never see them and time out.
    fake_llm.reply("one two three four five", pieces=5, hold_after=3)
    sink = Sink(fake_llm, release_after=2)
    reply = await make().complete(USER, on_text=sink)
    assert sink.before_end[:2] == ["one t", "wo th"]
    assert "".join(sink.pieces) == reply.content == "one two three four five"
    assert fake_llm.streams_finished == 1
    assert fake_llm.requests[0]["stream"] is True
    assert fake_llm.requests[0]["stream_options"] == {"include_usage": True}


async def test_tool_call_deltas_are_assembled(fake_llm: FakeOpenAI, make: Make) -> None:
    fake_llm.add(
        Step(
            "tool_calls",
            text="Let me look.",
            calls=(("get_weather", {"city": "Oslo"}, "call_a"), ("get_weather", "{bad", None)),
            pieces=4,
        )
    )
    sink = Sink(fake_llm)
    reply = await make().complete(USER, TOOLS, on_text=sink)
    assert reply.content == "Let me look." == "".join(sink.pieces)
    assert reply.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
        ("call_a", "get_weather", '{"city": "Oslo"}'),
        (reply.tool_calls[1].id, "get_weather", "{bad"),
    ]
    assert reply.tool_calls[1].id not in ("", "call_a")
    assert fake_llm.streams_finished == 1  # assembled from deltas, not read whole


async def test_usage_comes_from_the_final_chunk(fake_llm: FakeOpenAI, make: Make) -> None:
    fake_llm.reply(
        "counted", usage={"prompt_tokens": 17, "completion_tokens": 4, "total_tokens": 21}
    )
    reply = await make().complete(USER, on_text=Sink(fake_llm))
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (17, 4)
    assert fake_llm.streams_finished == 1


async def test_a_stream_cut_after_text_is_not_retried(fake_llm: FakeOpenAI, make: Make) -> None:
    fake_llm.reply("the first half and the second half", pieces=4, cut_after=3)  # role + 2 pieces
    fake_llm.reply("a second, different reply")
    sink = Sink(fake_llm)
    provider = RetryingProvider(make(), max_retries=3, base_delay=0.01)
    with pytest.raises(ProviderError) as err:
        await provider.complete(USER, on_text=sink)
    assert err.value.shown == "".join(sink.pieces) == "the first half and"
    assert err.value.category == "server" and "cut" in err.value.detail
    assert len(fake_llm.requests) == 1  # a retry would have shown a second reply


async def test_a_cut_before_any_text_is_retried(fake_llm: FakeOpenAI, make: Make) -> None:
    fake_llm.tool_call("get_weather", {"city": "Oslo"}, cut_after=3)  # no text, a torn tool call
    fake_llm.reply("whole")
    sink = Sink(fake_llm)
    reply = await RetryingProvider(make(), 3, base_delay=0.01).complete(USER, on_text=sink)
    assert reply.content == "whole" and not reply.tool_calls
    assert len(fake_llm.requests) == 2


async def test_an_error_before_the_first_chunk_is_retried(fake_llm: FakeOpenAI, make: Make) -> None:
    fake_llm.error(503, "overloaded")
    fake_llm.reply("after the retry", pieces=2)
    sink = Sink(fake_llm)
    reply = await RetryingProvider(make(), 3, base_delay=0.01).complete(USER, on_text=sink)
    assert reply.content == "after the retry" == "".join(sink.pieces)
    assert len(fake_llm.requests) == 2


async def test_an_error_before_the_first_chunk_keeps_its_category(
    fake_llm: FakeOpenAI, make: Make
) -> None:
    fake_llm.error(429, "slow down", retry_after=7)
    with pytest.raises(ProviderError) as err:
        await make().complete(USER, on_text=Sink(fake_llm))
    assert (err.value.category, err.value.retry_after, err.value.shown) == ("rate_limited", 7, "")


async def test_surrogates_split_across_deltas_are_joined_or_replaced(
    fake_llm: FakeOpenAI, make: Make
) -> None:
    # "ab" + high surrogate | low surrogate + "cd": a pair split between two chunks is one
    # character; a surrogate without its pair becomes U+FFFD. Nothing shown is invalid.
    fake_llm.reply("ab\ud83d\ude00cd", pieces=2)
    fake_llm.reply("x\ud83dy")
    provider = make()
    sink = Sink(fake_llm)
    joined = await provider.complete(USER, on_text=sink)
    lone = await provider.complete(USER, on_text=sink)
    assert joined.content == "ab\U0001f600cd"
    assert lone.content == "x\ufffdy"
    for piece in sink.pieces:
        piece.encode("utf-8")  # raises on a lone surrogate
    assert fake_llm.streams_finished == 2


async def test_without_a_sink_the_call_does_not_stream(fake_llm: FakeOpenAI, make: Make) -> None:
    fake_llm.reply("plain")
    assert (await make().complete(USER)).content == "plain"
    assert "stream" not in fake_llm.requests[0]


async def test_a_server_that_ignores_stream_still_answers_once(fake_llm: FakeOpenAI) -> None:
    settings = LLMSettings(model="openai/fake", api_base=fake_llm.base_url, timeout_s=10)
    provider = OpenAIHTTPProvider(settings)
    body = '{"choices": [{"index": 0, "message": {"role": "assistant", "content": "whole"}}]}'
    fake_llm.raw(body)
    sink = Sink(fake_llm)
    try:
        reply = await provider.complete(USER, on_text=sink)
    finally:
        await provider.close()
    assert reply.content == "whole" and sink.pieces == ["whole"]


async def test_openais_own_api_gets_max_completion_tokens(fake_llm: FakeOpenAI) -> None:
    # The route for api.openai.com says which field to send; here it points at the fake.
    settings = LLMSettings(model="openai/gpt-5", api_key=SecretStr(TEST_KEY), timeout_s=10)
    path = Route(
        "direct", "test", "gpt-5", fake_llm.base_url, max_tokens_field="max_completion_tokens"
    )
    provider = OpenAIHTTPProvider(settings, path)
    try:
        await provider.complete(USER, max_tokens=99, on_text=Sink(fake_llm))
    finally:
        await provider.close()
    assert fake_llm.requests[0]["max_completion_tokens"] == 99
    assert "max_tokens" not in fake_llm.requests[0]
