"""Usage as each transport reports it, cached prompt tokens included: the lean client and
litellm, with and without streaming, against the loopback fake over HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from nanomem.providers.provider import Provider, Usage, usage_of
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.http import USER, transports

Make = Callable[[], Provider]

OPENAI = {
    "prompt_tokens": 1200,
    "completion_tokens": 80,
    "total_tokens": 1280,
    "prompt_tokens_details": {"cached_tokens": 1024},
}
# Anthropic's counts as an OpenAI-compatible proxy (or litellm's own object) passes them on.
ANTHROPIC = {
    "prompt_tokens": 1500,
    "completion_tokens": 40,
    "total_tokens": 1540,
    "cache_read_input_tokens": 900,
    "cache_creation_input_tokens": 300,
}


@pytest.fixture(params=["direct", "litellm"])
async def make(request: pytest.FixtureRequest, fake_llm: FakeOpenAI) -> AsyncIterator[Make]:
    async with transports(request.param, fake_llm.base_url) as build:
        yield build


async def _ignore(piece: str) -> None:
    return None


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_cached_prompt_tokens_arrive_on_both_transports(
    make: Make, fake_llm: FakeOpenAI, stream: bool
) -> None:
    fake_llm.reply("hello", usage=OPENAI)
    reply = await make().complete(USER, on_text=_ignore if stream else None)
    assert reply.usage == Usage(1200, 80, cached_tokens=1024)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_anthropic_cache_reads_and_writes_arrive_on_both_transports(
    make: Make, fake_llm: FakeOpenAI, stream: bool
) -> None:
    fake_llm.reply("hello", usage=ANTHROPIC)
    reply = await make().complete(USER, on_text=_ignore if stream else None)
    assert reply.usage == Usage(1500, 40, cached_tokens=900, cache_write_tokens=300)


@pytest.mark.parametrize(
    ("reported", "expected"),
    [
        ({"prompt_tokens": 10, "completion_tokens": 2}, Usage(10, 2)),
        ({"prompt_tokens": None, "completion_tokens": 2}, Usage(0, 2)),
        (
            {"prompt_tokens": 10, "completion_tokens": 2, "prompt_cache_hit_tokens": 8},
            Usage(10, 2, 8),
        ),
        # A cache cannot serve more than the prompt: a wild figure is capped, not added.
        (
            {"prompt_tokens": 10, "completion_tokens": 2, "cache_read_input_tokens": 99},
            Usage(10, 2, 10),
        ),
        ({"prompt_tokens": -5, "completion_tokens": 2}, Usage(0, 2)),
        ({"prompt_tokens": "many", "completion_tokens": 2}, None),
        ({"prompt_tokens": [1], "completion_tokens": 2}, None),
        ({"prompt_tokens": 1e400, "completion_tokens": 2}, None),
        (
            {"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": "x"},
            Usage(10, 2),
        ),
        (None, None),
    ],
)
def test_usage_of_reads_what_providers_send_and_refuses_what_is_not_a_count(
    reported: Any, expected: Usage | None
) -> None:
    assert usage_of(reported) == expected
