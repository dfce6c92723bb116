"""litellm drives /v1 as its users do: `completion` and `acompletion` with the client's tools
and with `response_format`; the session chosen by the X-Session-Id header, since litellm
drops `user=` for OpenAI-compatible servers."""

from __future__ import annotations

import json
from typing import Any

import litellm

from tests.helpers.clients import WEATHER_TOOL, Agent, Forecast, weather

ASK = 'What should I wear? use weather {"city": "Paris"}'


def through(agent: Agent, session: str) -> dict[str, Any]:
    return {
        "model": "openai/nanomem",
        "api_base": agent.base,
        "api_key": agent.key,
        "extra_headers": {"X-Session-Id": session},
    }


async def test_completion_with_tools_round_trip(agent: Agent) -> None:
    messages: list[Any] = [{"role": "user", "content": ASK}]
    first = await agent.call(
        litellm.completion, messages=messages, tools=[WEATHER_TOOL], **through(agent, "lite")
    )
    (call,) = first.choices[0].message.tool_calls
    assert first.choices[0].finish_reason == "tool_calls"
    result = weather(**json.loads(call.function.arguments))
    messages += [
        first.choices[0].message.model_dump(),
        {"role": "tool", "tool_call_id": call.id, "content": result},
    ]
    second = await litellm.acompletion(
        messages=messages, tools=[WEATHER_TOOL], **through(agent, "lite")
    )
    assert second.choices[0].message.content == "tool said: sunny, 21 C in Paris"
    assert await agent.said("lite") == [ASK]  # in the header's session, not api:default
    assert await agent.tool_results("lite") == [result]


async def test_response_format_gives_json_of_the_schema(agent: Agent) -> None:
    messages = [{"role": "user", "content": "The forecast for Paris"}]
    reply = await litellm.acompletion(
        messages=messages, response_format=Forecast, **through(agent, "lite-json")
    )
    forecast = Forecast.model_validate_json(reply.choices[0].message.content)
    assert forecast == Forecast(city="Paris", temperature_c=21, summary="sunny")
    assert await agent.said("lite-json") == ["The forecast for Paris"]


async def test_a_streamed_tool_call_is_assembled(agent: Agent) -> None:
    messages = [{"role": "user", "content": ASK}]
    stream = await litellm.acompletion(
        messages=messages, tools=[WEATHER_TOOL], stream=True, **through(agent, "lite-stream")
    )
    built: Any = litellm.stream_chunk_builder([chunk async for chunk in stream])
    (call,) = built.choices[0].message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "weather",
        {"city": "Paris"},
    )
    assert built.choices[0].finish_reason == "tool_calls"
    assert await agent.said("lite-stream") == [ASK]
