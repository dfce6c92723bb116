"""What a Responses API client adds to a turn, through the official openai SDK against the real
gateway (a scripted model): its function tools round trip, typed output with
`responses.parse`, its instructions, a cut answer, and retries saved once."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from nanomem.providers import ProviderError, Reply, ToolCall
from nanomem.providers.scripted import call, text
from tests.helpers import WAIT_S
from tests.helpers.api import Served
from tests.helpers.client_turns import FLAT_WEATHER, client_result
from tests.helpers.gateway import API_KEY


class Weather(BaseModel):
    city: str
    celsius: int


async def saved(served: Served, session: str) -> list[dict[str, Any]]:
    return list((await served.gateway.app.sessions.get(f"api:{session}")).messages)


def said(messages: list[dict[str, Any]], role: str) -> list[str]:
    return [str(m["content"]) for m in messages if m["role"] == role]


async def streamed_with_tools(served: Served, question: str, session: str) -> tuple[list[Any], Any]:
    """A streamed response to `question` with the client's tool: its events, and the
    response the SDK's stream helper assembled from them."""
    async with served.client().responses.stream(
        model="nanomem", input=question, tools=[FLAT_WEATHER], extra_body={"session_id": session}
    ) as stream:
        events = [event async for event in stream]
        return events, await stream.get_final_response()


async def test_a_function_tool_round_trip_goes_on_with_the_result(served: Served) -> None:
    served.provider.add(call("get_weather", {"city": "Paris"}, "call_w"), text("Sunny in Paris."))
    client = served.client()
    first = await client.responses.create(
        model="nanomem",
        input="weather in Paris?",
        tools=[FLAT_WEATHER],
        extra_body={"session_id": "tools"},
    )
    [item] = first.output
    assert item.type == "function_call" and item.name == "get_weather"
    assert item.call_id == "call_w" and json.loads(item.arguments) == {"city": "Paris"}
    assert item.id is not None and item.id.startswith("fc_") and first.status == "completed"
    assert first.output_text == ""
    second = await client.responses.create(
        model="nanomem",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": "call_w", "output": "sunny, 24 C"}],
        tools=[FLAT_WEATHER],
    )
    assert second.output_text == "Sunny in Paris."
    seen = served.provider.calls[-1]
    assert [client_result(text) for text in said(seen, "tool")] == ["sunny, 24 C"]
    assert any(t["function"]["name"] == "get_weather" for t in served.provider.tools_seen[0] or [])
    messages = await saved(served, "tools")
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]


async def test_the_whole_conversation_sent_again_goes_on_as_well(served: Served) -> None:
    # The Agents SDK's way without previous_response_id: every item again, the outputs last.
    served.provider.add(call("get_weather", {"city": "Rome"}, "call_r"), text("Rain in Rome."))
    client = served.client()
    history: list[Any] = [{"role": "user", "content": "weather in Rome?"}]
    first = await client.responses.create(
        model="nanomem",
        input=history,
        tools=[FLAT_WEATHER],
        extra_body={"session_id": "again"},
    )
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history.append({"type": "function_call_output", "call_id": "call_r", "output": "rain"})
    second = await client.responses.create(
        model="nanomem",
        input=history,
        tools=[FLAT_WEATHER],
        extra_body={"session_id": "again"},
    )
    assert second.output_text == "Rain in Rome."
    assert len(said(await saved(served, "again"), "user")) == 1


async def test_a_streamed_function_call_is_assembled_by_the_sdk(served: Served) -> None:
    served.provider.add(call("get_weather", {"city": "Oslo"}, "call_o"))
    events, final = await streamed_with_tools(served, "weather in Oslo?", "streamed-call")
    assert [event.type for event in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    [item] = final.output
    assert item.type == "function_call" and json.loads(item.arguments) == {"city": "Oslo"}


async def test_parse_gives_typed_output_and_the_model_is_asked_for_the_schema(
    served: Served,
) -> None:
    served.provider.add(text('{"city": "Paris", "celsius": 24}'))
    parsed = await served.client().responses.parse(
        model="nanomem",
        input="the weather in Paris, as data",
        text_format=Weather,
        extra_body={"session_id": "typed"},
    )
    assert parsed.output_parsed == Weather(city="Paris", celsius=24)
    asked = served.provider.options_seen[-1]  # type: ignore[attr-defined]
    assert asked.response_format["type"] == "json_schema"
    assert asked.response_format["json_schema"]["name"] == "Weather"


async def test_instructions_reach_the_model_and_are_never_saved(served: Served) -> None:
    await served.client().responses.create(
        model="nanomem",
        instructions="Answer in French.",
        input=[
            {"role": "developer", "content": "Use metric units."},
            {"role": "user", "content": "how warm is it?"},
        ],
        extra_body={"session_id": "told"},
    )
    seen = served.provider.calls[0]
    systems = said(seen, "system")
    assert len(systems) >= 2 and "Answer in French." not in systems[0]
    assert any("Answer in French." in s and "Use metric units." in s for s in systems[1:])
    kept = json.dumps(await saved(served, "told"))
    assert "Answer in French." not in kept and "Use metric units." not in kept


async def test_an_answer_cut_at_max_output_tokens_is_incomplete(served: Served) -> None:
    for stream in (False, True):
        served.provider.add(Reply("The answer was cut", finish_reason="length"))
        body: dict[str, Any] = dict(
            model="nanomem",
            input="a long one",
            max_output_tokens=5,
            extra_body={"session_id": "cut"},
        )
        if stream:
            events = [e async for e in await served.client().responses.create(stream=True, **body)]
            assert events[-1].type == "response.incomplete"
            response = events[-1].response
        else:
            response = await served.client().responses.create(**body)
        assert response.status == "incomplete" and response.incomplete_details is not None
        assert response.incomplete_details.reason == "max_output_tokens"
        assert response.output_text == "The answer was cut"
    assert served.provider.options_seen[-1].max_tokens == 5  # type: ignore[attr-defined]


async def test_the_sdk_s_retry_after_a_failure_saves_the_message_once(served: Served) -> None:
    served.provider.add(ProviderError("auth", "a bad moment upstream"))  # 502: the SDK retries
    client = openai.AsyncOpenAI(
        base_url=served.base, api_key=API_KEY, max_retries=2, timeout=WAIT_S
    )
    response = await client.responses.create(
        model="nanomem", input="only once please", extra_body={"session_id": "retried"}
    )
    assert response.output_text.endswith("only once please")
    assert len(served.provider.calls) == 2
    messages = await saved(served, "retried")
    assert len([m for m in messages if m["role"] == "user"]) == 1
    # Every attempt of a request has the same response id: the one its answer is saved with.
    replies = [m for m in messages if m["role"] == "assistant" and "failed" not in m]
    assert [m.get("reply_id") for m in replies] == [response.id]


async def test_an_idempotency_key_seen_before_answers_from_the_stored_turn(served: Served) -> None:
    client = served.client()
    answers = [
        await client.responses.create(
            model="nanomem",
            input="say it once",
            extra_body={"session_id": "keyed"},
            extra_headers={"Idempotency-Key": "key-1"},
        )
        for _ in range(2)
    ]
    assert answers[0].output_text == answers[1].output_text and answers[0].id == answers[1].id
    assert len(served.provider.calls) == 1
    assert [m["role"] for m in await saved(served, "keyed")] == ["user", "assistant"]


async def test_text_beside_a_call_is_a_message_before_the_call_item(served: Served) -> None:
    check = ToolCall("call_c", "get_weather", '{"city": "Lima"}')
    served.provider.add(Reply("Let me check the weather.", (check,), finish_reason="tool_calls"))
    events, final = await streamed_with_tools(served, "weather in Lima?", "beside")
    assert [item.type for item in final.output] == ["message", "function_call"]
    assert final.output_text == "Let me check the weather."
    added = [e for e in events if e.type == "response.output_item.added"]
    assert [(e.output_index, e.item.type) for e in added] == [(0, "message"), (1, "function_call")]


async def test_an_answer_that_never_fits_the_schema_is_a_422(served: Served) -> None:
    served.provider.add(text("not JSON at all"), text("still not JSON"))
    with pytest.raises(openai.UnprocessableEntityError) as unmet:
        await served.client().responses.parse(
            model="nanomem", input="as data", text_format=Weather, extra_body={"session_id": "u"}
        )
    assert (
        isinstance(unmet.value.body, dict) and unmet.value.body["code"] == "response_format_unmet"
    )
    assert len(served.provider.calls) == 2  # asked, then asked again once


async def test_a_client_tool_named_like_one_of_ours_is_a_400_with_nothing_saved(
    served: Served,
) -> None:
    ours = {**FLAT_WEATHER, "name": "read_file"}
    with pytest.raises(openai.BadRequestError) as refused:
        await served.client().responses.create(
            model="nanomem",
            input="read it",
            tools=[ours],  # type: ignore[list-item]
            extra_body={"session_id": "clash"},
        )
    assert "read_file" in refused.value.message
    assert served.provider.calls == []
    assert await saved(served, "clash") == []
