"""The lean client's timeout bounds connecting and each silence, not a whole streamed reply."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from pydantic import SecretStr

from nanomem.config import LLMSettings
from nanomem.providers.openai_http import OpenAIHTTPProvider
from nanomem.providers.provider import ProviderError, RetryingProvider
from tests.conftest import TEST_KEY
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.http import USER

Make = Callable[..., OpenAIHTTPProvider]


@pytest.fixture
def srv() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server
        server.release()  # a stream still held by the test ends


@pytest.fixture
async def make(srv: FakeOpenAI) -> AsyncIterator[Make]:
    made: list[OpenAIHTTPProvider] = []

    def build(timeout_s: float) -> OpenAIHTTPProvider:
        settings: dict[str, Any] = {
            "model": "openai/fake",
            "api_base": srv.base_url,
            "api_key": SecretStr(TEST_KEY),
            "timeout_s": timeout_s,
        }
        made.append(OpenAIHTTPProvider(LLMSettings(**settings)))
        return made[-1]

    yield build
    for provider in made:
        await provider.close()


class Sink:
    def __init__(self) -> None:
        self.pieces: list[str] = []

    async def __call__(self, piece: str) -> None:
        self.pieces.append(piece)


async def test_a_reply_streaming_longer_than_the_timeout_arrives_whole(
    srv: FakeOpenAI, make: Make
) -> None:
    # Eight pieces 0.3 s apart: each silence is under the 1 s timeout, the whole reply is not.
    text = "one two three four five six seven eight"
    srv.reply(text, pieces=8, pause=0.3)
    sink = Sink()
    reply = await make(timeout_s=1.0).complete(USER, on_text=sink)
    assert reply.content == text == "".join(sink.pieces)
    assert srv.streams_finished == 1


async def test_a_silent_stall_before_any_text_times_out_and_is_retried(
    srv: FakeOpenAI, make: Make
) -> None:
    srv.reply("never shown", pieces=3, hold_after=1)  # the role chunk, then silence
    srv.reply("after the retry", pieces=2)
    sink = Sink()
    provider = RetryingProvider(make(timeout_s=0.5), max_retries=3, base_delay=0.01)
    reply = await provider.complete(USER, on_text=sink)
    assert reply.content == "after the retry" == "".join(sink.pieces)
    assert len(srv.requests) == 2


async def test_a_silent_stall_after_text_ends_with_what_was_shown(
    srv: FakeOpenAI, make: Make
) -> None:
    srv.reply("shown then silence", pieces=3, hold_after=2)  # the role chunk, one piece
    srv.reply("a second, different reply")
    sink = Sink()
    provider = RetryingProvider(make(timeout_s=0.5), max_retries=3, base_delay=0.01)
    with pytest.raises(ProviderError) as err:
        await provider.complete(USER, on_text=sink)
    assert err.value.category == "timeout"
    assert err.value.shown == "".join(sink.pieces) != ""
    assert len(srv.requests) == 1  # a retry would have shown a second reply
