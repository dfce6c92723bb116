"""The agent API served in-process by the real Gateway and API channel (scripted model), through
the official `openai` client: test_api_e2e.py shows the same through a gateway process."""

from __future__ import annotations

import asyncio

import openai
import pytest

from nanomem.channel_registry import load_channel
from nanomem.gateway.service import Gateway
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider
from tests.conftest import make_app
from tests.helpers import WAIT_S, until
from tests.helpers.api import Served, up
from tests.helpers.gateway import API_KEY

NEVER_S = 3600.0  # a model latency no test waits out: the stop is what ends that turn


async def test_a_completion_is_the_agents_answer_and_is_saved(served: Served) -> None:
    reply = await served.client().chat.completions.create(
        model="nanomem",
        messages=[{"role": "user", "content": "hello api"}],
        extra_body={"session_id": "plain"},
    )
    answer = reply.choices[0].message.content or ""
    assert answer.startswith("echo: ") and answer.endswith("hello api")
    assert "channel api" in served.provider.calls[0][-1]["content"]
    saved = (await served.gateway.app.sessions.get("api:plain")).messages
    assert [m["role"] for m in saved] == ["user", "assistant"]


async def test_a_streamed_completion_arrives_in_pieces_with_usage(served: Served) -> None:
    stream = await served.client().chat.completions.create(
        model="nanomem",
        messages=[{"role": "user", "content": "stream this reply please"}],
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"session_id": "streamed"},
    )
    chunks = [chunk async for chunk in stream]
    pieces = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert len(pieces) >= 2 and "".join(pieces).endswith("reply please")
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


async def test_models_list_the_agent(served: Served) -> None:
    assert [m.id async for m in served.client().models.list()] == ["nanomem"]


async def test_a_wrong_key_is_refused_before_the_model(served: Served) -> None:
    with pytest.raises(openai.AuthenticationError):
        await served.client("nm-wrong").chat.completions.create(
            model="nanomem", messages=[{"role": "user", "content": "let me in"}]
        )
    assert served.provider.calls == []
    ok = await served.client().chat.completions.create(  # control: the right key is let in
        model="nanomem", messages=[{"role": "user", "content": "me"}]
    )
    assert (ok.choices[0].message.content or "").endswith("me")


async def test_bad_requests_get_openai_errors_and_never_reach_the_model(served: Served) -> None:
    cases = [
        (b"{not json", 400, "not valid JSON"),
        (b'{"messages": []}', 400, "non-empty list"),
        (b'{"messages": [{"role": "user", "content": "  "}]}', 400, "empty"),
        (b'{"messages": [{"role": "user", "content": "' + b"x" * 1_100_000 + b'"}]}', 413, "MB"),
    ]
    for body, status, words in cases:
        got, error = await served.post(body)
        assert got == status, (body[:60], error)
        assert words in error["error"]["message"] and error["error"]["type"]
    assert served.provider.calls == []
    got, _ = await served.post(b'{"messages": [{"role": "user", "content": "fine"}]}')
    assert got == 200 and len(served.provider.calls) == 1  # control: a good one does


async def test_a_turn_the_stop_cuts_short_is_answered_503_and_one_within_the_grace_200(
    home: Home,
) -> None:
    # The API calls the core directly: a graceful stop lets its turn finish within the grace
    # period (the core's work), then tells a request still waiting that the gateway stops.
    provider = ScriptedProvider(latency=0.3)
    app = make_app(
        home,
        provider,
        gateway={"port": 0, "grace_s": 1},
        api={"enabled": True, "keys": [API_KEY]},
        dream={"enabled": False},
    )
    gateway = Gateway(app, {"api": load_channel("api").from_app(app)})
    task = asyncio.create_task(gateway.run())
    await until(lambda: gateway.port and up(gateway))
    served = Served(gateway, provider)
    served.base = f"http://127.0.0.1:{gateway.port}/v1"
    body = b'{"messages": [{"role": "user", "content": "quick"}], "session_id": "a"}'
    quick = asyncio.ensure_future(served.post(body))
    await until(lambda: provider.calls)
    provider.latency = NEVER_S  # the next turn outlasts the grace period
    slow = asyncio.ensure_future(served.post(body.replace(b'"a"', b'"b"')))
    await until(lambda: len(provider.calls) == 2)
    gateway.request_stop()
    status, answer = await asyncio.wait_for(quick, WAIT_S)
    assert status == 200 and answer["choices"][0]["message"]["content"].endswith("quick")
    status, refused = await asyncio.wait_for(slow, WAIT_S)
    assert status == 503 and refused["error"]["code"] == "gateway_stopping"
    assert await asyncio.wait_for(task, WAIT_S) == 0
