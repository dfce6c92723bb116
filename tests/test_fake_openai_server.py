"""Tests for the loopback OpenAI-compatible fake server, driven through litellm and openai."""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # must precede the litellm import

import aiohttp
import litellm
import openai
import pytest

from tests.fakes.openai_server import FakeOpenAI, Step
from tests.helpers import until

litellm.suppress_debug_info = True

USER = [{"role": "user", "content": "hi"}]
NEVER_S = 3600.0  # a latency no test waits out
WAIT_S = 60.0  # the safety net of every wait
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


@pytest.fixture
def srv() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


async def complete(srv: FakeOpenAI, messages: list[dict[str, Any]] = USER, **kw: Any) -> Any:
    kw.setdefault("timeout", 5)
    return await litellm.acompletion(
        model="openai/fake",
        api_base=srv.base_url,
        api_key="sk-test",
        messages=messages,
        max_retries=0,
        **kw,
    )


async def text_of(stream: Any) -> str:
    return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])


async def test_scripted_text_reply(srv: FakeOpenAI) -> None:
    srv.reply("hello there", usage={"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10})
    resp = await complete(srv)
    assert resp.choices[0].message.content == "hello there"
    assert resp.choices[0].finish_reason == "stop"
    assert (resp.usage.prompt_tokens, resp.usage.total_tokens) == (7, 10)
    assert srv.pending() == 0


async def test_tool_call_round_trip(srv: FakeOpenAI) -> None:
    srv.tool_call("get_weather", {"city": "Oslo"}, call_id="call_abc")
    srv.reply("It is sunny in Oslo.")
    first = await complete(srv, tools=TOOLS)
    msg = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls"
    assert msg.tool_calls[0].id == "call_abc"
    assert msg.tool_calls[0].function.name == "get_weather"
    assert json.loads(msg.tool_calls[0].function.arguments) == {"city": "Oslo"}

    history: list[dict[str, Any]] = [
        *USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_abc",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_abc", "content": "sunny"},
    ]
    second = await complete(srv, history, tools=TOOLS)
    assert second.choices[0].message.content == "It is sunny in Oslo."
    sent = srv.requests
    assert sent[0]["tools"][0]["function"]["name"] == "get_weather"
    assert sent[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_abc",
        "content": "sunny",
    }


async def test_malformed_arguments_pass_through_verbatim(srv: FakeOpenAI) -> None:
    srv.tool_call("get_weather", '{"city": "Osl', text="let me check")
    resp = await complete(srv, tools=TOOLS)
    msg = resp.choices[0].message
    assert msg.content == "let me check"
    assert msg.tool_calls[0].function.arguments == '{"city": "Osl'


async def test_several_tool_calls_get_distinct_ids(srv: FakeOpenAI) -> None:
    srv.tool_calls([("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Rome"})])
    resp = await complete(srv, tools=TOOLS)
    calls = resp.choices[0].message.tool_calls
    assert [json.loads(c.function.arguments)["city"] for c in calls] == ["Oslo", "Rome"]
    assert len({c.id for c in calls}) == 2


async def test_rate_limit_error_with_retry_after(srv: FakeOpenAI) -> None:
    srv.error(429, "slow down", retry_after=2)
    with pytest.raises(litellm.RateLimitError) as exc_info:
        await complete(srv)
    assert exc_info.value.status_code == 429
    assert "slow down" in str(exc_info.value)
    # litellm keeps the real response headers here; exc.response.headers is synthetic/empty.
    assert getattr(exc_info.value, "litellm_response_headers", {})["retry-after"] == "2"


async def test_server_error(srv: FakeOpenAI) -> None:
    srv.error(500)
    with pytest.raises(litellm.InternalServerError) as exc_info:
        await complete(srv)
    assert exc_info.value.status_code == 500


async def test_hang_triggers_client_timeout(srv: FakeOpenAI) -> None:
    srv.hang(NEVER_S)
    with pytest.raises(litellm.Timeout):  # the server never answers: the client gave up
        await asyncio.wait_for(complete(srv, timeout=0.5), WAIT_S)


async def test_streaming_text(srv: FakeOpenAI) -> None:
    srv.reply(
        "streamed reply text", usage={"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    )
    stream = await complete(srv, stream=True, stream_options={"include_usage": True})
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "streamed reply text"
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 1
    assert chunks[-1].usage.total_tokens == 3
    assert srv.requests[0]["stream"] is True


async def test_streaming_tool_calls(srv: FakeOpenAI) -> None:
    srv.tool_calls([("get_weather", {"city": "Oslo"}), ("get_weather", "{bad")])
    stream = await complete(srv, tools=TOOLS, stream=True)
    built: Any = litellm.stream_chunk_builder([chunk async for chunk in stream])
    calls = built.choices[0].message.tool_calls
    assert [c.function.arguments for c in calls] == ['{"city": "Oslo"}', "{bad"]
    assert built.choices[0].finish_reason == "tool_calls"


async def test_fallback_echo_and_custom_fallback(srv: FakeOpenAI) -> None:
    parts = [{"role": "user", "content": [{"type": "text", "text": "ping"}]}]
    assert (await complete(srv, parts)).choices[0].message.content == "echo: ping"
    srv.set_fallback(lambda req: Step.reply(f"{len(req['messages'])} messages"))
    assert (await complete(srv)).choices[0].message.content == "1 messages"
    srv.set_fallback(None)
    assert (await complete(srv)).choices[0].message.content == "echo: hi"


async def test_concurrent_requests_overlap() -> None:
    with FakeOpenAI() as srv:
        for _ in range(20):
            srv.reply("held", hold_after=0)
        calls = [
            asyncio.create_task(complete(srv, [{"role": "user", "content": f"m{i}"}], stream=True))
            for i in range(20)
        ]
        await until(lambda: srv.held == 20)  # all twenty in the server at once, none answered
        srv.release()
        streams = await asyncio.wait_for(asyncio.gather(*calls), WAIT_S)
        replies = [await asyncio.wait_for(text_of(stream), WAIT_S) for stream in streams]
    assert replies == ["held"] * 20
    assert sorted(str(r["messages"][-1]["content"]) for r in srv.requests) == sorted(
        f"m{i}" for i in range(20)
    )


async def test_server_handles_a_burst_of_100_raw_requests() -> None:
    body = {"model": "fake", "messages": USER, "stream": True}
    with FakeOpenAI() as srv:
        for _ in range(100):
            srv.reply("held", hold_after=0)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

            async def one() -> int:
                async with session.post(f"{srv.base_url}/chat/completions", json=body) as r:
                    await r.read()
                    return r.status

            burst = asyncio.gather(*(one() for _ in range(100)))
            await until(lambda: srv.held == 100)  # every one of them in the server at once
            srv.release()
            statuses = await asyncio.wait_for(burst, WAIT_S)
    assert statuses == [200] * 100


async def test_requests_and_auth_headers_recorded(srv: FakeOpenAI) -> None:
    await complete(srv, tools=TOOLS, temperature=0.2)
    assert srv.auth_headers == ["Bearer sk-test"]
    (req,) = srv.requests
    assert req["model"] == "fake"
    assert req["messages"] == USER
    assert req["temperature"] == 0.2
    srv.reply("unused")
    srv.clear()
    assert (srv.requests, srv.auth_headers, srv.pending()) == ([], [], 0)


async def test_stop_is_prompt_while_a_request_hangs() -> None:
    srv = FakeOpenAI().start()
    srv.hang(NEVER_S)
    call = asyncio.create_task(complete(srv, timeout=NEVER_S))
    await until(lambda: srv.requests)
    # Waiting for the request would take an hour: a stop within WAIT_S did not wait for it.
    await asyncio.wait_for(asyncio.to_thread(srv.stop), WAIT_S)
    # The dropped connection surfaces in litellm as InternalServerError("Connection error.").
    with pytest.raises(litellm.InternalServerError):
        await asyncio.wait_for(call, WAIT_S)
    srv.stop()  # idempotent


def test_sync_openai_client_and_models_endpoint() -> None:
    with FakeOpenAI() as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="sk-sync", max_retries=0, timeout=5)
        srv.reply("from a blocking test")
        resp = client.chat.completions.create(model="fake", messages=USER)  # type: ignore[arg-type]
        assert resp.choices[0].message.content == "from a blocking test"
        assert resp.model == "fake"
        assert [m.id for m in client.models.list()] == ["fake"]
        assert srv.auth_headers == ["Bearer sk-sync"]


def test_invalid_json_body_is_rejected() -> None:
    with FakeOpenAI() as srv:
        req = urllib.request.Request(
            f"{srv.base_url}/chat/completions", data=b"{nope", method="POST"
        )
        with pytest.raises(urllib.error.HTTPError) as exc_info:
            urllib.request.urlopen(req, timeout=5)
        assert exc_info.value.code == 400
        assert srv.requests == []


async def test_drain_hands_out_request_sizes_once(srv: FakeOpenAI) -> None:
    started = time.monotonic()
    await complete(srv, [*USER, {"role": "assistant", "content": "yo"}, *USER])
    await complete(srv)
    srv.reply("slow", latency=0.4)
    await complete(srv)
    waited = time.monotonic() - started  # the server's busy time lies within it
    drain = urllib.request.Request(f"{srv.base_url}/_drain", method="POST")
    with urllib.request.urlopen(drain, timeout=5) as resp:
        first = json.loads(resp.read())
    assert first["requests"] == [{"messages": 3}, {"messages": 1}, {"messages": 1}]
    assert 0 < first["busy_seconds"] <= waited - 0.4  # the scripted latency is not work
    assert srv.requests == []
    with urllib.request.urlopen(drain, timeout=5) as resp:
        assert json.loads(resp.read()) == {"requests": [], "busy_seconds": 0.0}


async def test_usage_is_estimated_from_the_request_size(srv: FakeOpenAI) -> None:
    small = await complete(srv)
    large = await complete(srv, [{"role": "user", "content": "word " * 400}])
    assert 0 < small.usage.prompt_tokens < 60
    assert 500 <= large.usage.prompt_tokens <= 560  # 2,000 characters at ~4 a token
