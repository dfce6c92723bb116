"""The openai SDK drives /v1 as its users do: chat completions with the client's tools (the
round trip, streamed too), `.parse()`, system messages, refused parameters, and the Responses
API (create, stream, parse, function tools, previous_response_id); async and blocking."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from tests.fakes.schema_model import SchemaModel
from tests.helpers.clients import VALUES, WEATHER_TOOL, Agent, Forecast, weather

ASK = 'What should I wear? use weather {"city": "Paris"}'


def client(agent: Agent) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=agent.base, api_key=agent.key)


async def test_a_client_tool_round_trip_pauses_the_turn_and_goes_on(agent: Agent) -> None:
    messages: list[Any] = [{"role": "user", "content": ASK}]
    first = await client(agent).chat.completions.create(
        model="nanomem", messages=messages, tools=[WEATHER_TOOL], user="trip"
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "weather"
    result = weather(**json.loads(call.function.arguments))
    messages += [choice.message, {"role": "tool", "tool_call_id": call.id, "content": result}]
    second = await client(agent).chat.completions.create(
        model="nanomem", messages=messages, tools=[WEATHER_TOOL], user="trip"
    )
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == "tool said: sunny, 21 C in Paris"
    assert await agent.said("trip") == [ASK]  # the continuation is no new message of theirs
    assert await agent.tool_results("trip") == ["sunny, 21 C in Paris"]
    (saved,) = await agent.tool_results("trip", as_saved=True)
    assert saved.startswith("<<untrusted ")  # outside text for the model, as a web page is


async def test_streamed_tool_calls_are_assembled_by_the_sdk(agent: Agent) -> None:
    class Weather(BaseModel):
        city: str

    async with client(agent).chat.completions.stream(
        model="nanomem",
        messages=[{"role": "user", "content": ASK.replace("weather", "Weather")}],
        tools=[openai.pydantic_function_tool(Weather)],
        extra_body={"session_id": "streamed"},
    ) as stream:
        final = await stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.function.parsed_arguments == Weather(city="Paris")
    assert await agent.said("streamed") == [ASK.replace("weather", "Weather")]


async def test_parse_gives_the_pydantic_model(agent: Agent) -> None:
    parsed = await client(agent).chat.completions.parse(
        model="nanomem",
        messages=[{"role": "user", "content": "The forecast for Paris, please"}],
        response_format=Forecast,
        user="forecast",
    )
    forecast = parsed.choices[0].message.parsed
    assert forecast == Forecast(city="Paris", temperature_c=21, summary="sunny")
    request = agent.model.requests[-1]
    assert request["response_format"]["json_schema"]["name"] == "Forecast"
    answer = [m for m in await agent.messages("forecast") if m["role"] == "assistant"]
    assert json.loads(answer[-1]["content"]) == forecast.model_dump()  # kept as given


async def test_a_system_message_steers_the_turn_and_is_never_saved(agent: Agent) -> None:
    rule = "Answer as a pirate would, matey."
    messages: list[Any] = [
        {"role": "system", "content": rule},
        {"role": "user", "content": "Where is the treasure?"},
    ]
    await client(agent).chat.completions.create(model="nanomem", messages=messages, user="pirate")
    seen = agent.model_saw()
    assert seen[0]["role"] == "system" and rule not in seen[0]["content"]  # nanomem's own first
    theirs = [m for m in seen[1:] if rule in json.dumps(m)]
    assert [m["role"] for m in theirs] == ["system"]  # then the client's, as a system message
    assert rule not in await agent.file_text("pirate")
    assert await agent.said("pirate") == ["Where is the treasure?"]


async def test_unsupported_parameters_are_refused_by_name(agent: Agent) -> None:
    messages: list[Any] = [{"role": "user", "content": "three answers please"}]
    with pytest.raises(openai.BadRequestError) as refused:
        await client(agent).chat.completions.create(
            model="nanomem", messages=messages, n=3, user="refused"
        )
    assert refused.value.param == "n"
    assert agent.model.requests == [] and await agent.said("refused") == []


async def test_a_blocking_client_and_the_responses_api(agent: Agent) -> None:
    blocking = openai.OpenAI(base_url=agent.base, api_key=agent.key)
    reply = await agent.call(
        blocking.responses.create,
        model="nanomem",
        input="Remember: the boat is blue",
        instructions="Be brief.",
        extra_body={"session_id": "boat"},
    )
    assert reply.status == "completed" and reply.output_text.endswith("the boat is blue")
    assert "Be brief." in agent.model_texts() and "Be brief." not in await agent.file_text("boat")
    again = await client(agent).responses.create(
        model="nanomem", input="What colour is the boat?", previous_response_id=reply.id
    )
    assert "the boat is blue" in agent.model_texts()  # the same session: the first turn is there
    assert again.previous_response_id == reply.id
    assert await agent.said("boat") == ["Remember: the boat is blue", "What colour is the boat?"]


async def test_responses_stream_their_events_in_order(agent: Agent) -> None:
    async with client(agent).responses.stream(
        model="nanomem", input="Tell me a story", extra_body={"session_id": "story"}
    ) as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert "response.output_text.delta" in kinds and kinds[-1] == "response.completed"
    assert final.output_text.endswith("Tell me a story")


async def test_responses_parse_and_function_tools(agent: Agent) -> None:
    parsed = await client(agent).responses.parse(
        model="nanomem", input="Forecast for Paris", text_format=Forecast, user="rparse"
    )
    assert parsed.output_parsed == Forecast(city="Paris", temperature_c=21, summary="sunny")

    tool = {"type": "function", **WEATHER_TOOL["function"]}
    first = await client(agent).responses.create(
        model="nanomem", input=ASK, tools=[tool], user="rtools"
    )
    (call,) = [item for item in first.output if item.type == "function_call"]
    output = weather(**json.loads(call.arguments))
    second = await client(agent).responses.create(
        model="nanomem",
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": output}],
        tools=[tool],
        previous_response_id=first.id,
    )
    assert second.output_text == "tool said: sunny, 21 C in Paris"
    assert await agent.tool_results("rtools") == [output]
    assert await agent.said("rtools") == [ASK]


async def test_max_tokens_reaches_the_model_and_a_cut_answer_says_so(agent: Agent) -> None:
    said: list[Any] = [{"role": "user", "content": "Tell me everything"}]
    cut = await client(agent).chat.completions.create(
        model="nanomem", messages=said, max_tokens=5, user="cut"
    )
    assert agent.model.requests[-1]["max_tokens"] == 5
    assert cut.choices[0].finish_reason == "length" and len(cut.choices[0].message.content) <= 20
    short = await client(agent).responses.create(
        model="nanomem", input="And the rest?", max_output_tokens=16, user="cut"
    )
    assert short.status == "incomplete"
    assert short.incomplete_details and short.incomplete_details.reason == "max_output_tokens"


async def test_the_sdks_own_retries_save_the_message_once(agent: Agent) -> None:
    for _ in range(3):  # the model fails at the SDK's first attempt and both its retries
        agent.model.error(500, "upstream broke")
    retrying = openai.AsyncOpenAI(base_url=agent.base, api_key=agent.key)  # 2 retries, default
    said: list[Any] = [{"role": "user", "content": "Book the table"}]
    with pytest.raises(openai.APIStatusError) as failed:
        await retrying.chat.completions.create(model="nanomem", messages=said, user="retried")
    assert failed.value.status_code == 502 and len(agent.model.requests) == 3
    assert await agent.said("retried") == ["Book the table"]  # three attempts, one message


async def test_a_model_without_response_format_is_asked_by_prompt(agent: Agent) -> None:
    agent.model.set_fallback(SchemaModel(VALUES, native=False))
    parsed = await client(agent).chat.completions.parse(
        model="nanomem",
        messages=[{"role": "user", "content": "The forecast for Paris, please"}],
        response_format=Forecast,
        user="prompted",
    )
    assert parsed.choices[0].message.parsed == Forecast(
        city="Paris", temperature_c=21, summary="sunny"
    )
    refused, asked = agent.model.requests[-2:]
    assert "response_format" in refused and "response_format" not in asked
    assert '"temperature_c"' in agent.model_texts()  # the schema, in the turn's instructions
