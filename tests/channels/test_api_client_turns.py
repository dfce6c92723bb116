"""What a framework sends to /v1/chat/completions beyond plain chat, through the real openai
SDK against the in-process gateway (scripted model): its own tools (a turn pauses on them and
goes on with their results), streamed tool calls the SDK's stream helper assembles, `.parse()`,
the model options, refused parameters, X-Session-Id, and retries that never save twice."""

from __future__ import annotations

import json
from typing import Any

import openai
import pydantic
import pytest

from nanomem.providers import ProviderError, Reply
from nanomem.providers.scripted import call, text
from tests.conftest import log_lines
from tests.helpers.api import Served
from tests.helpers.client_turns import client_result

WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "Today's weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


# The SDK's stream helper parses only strict tools' arguments (it refuses others).
STRICT_WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "weather",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "note": {"type": ["string", "null"]}},
            "required": ["city", "note"],
            "additionalProperties": False,
        },
    },
}


class City(pydantic.BaseModel):
    name: str
    celsius: int


async def saved(served: Served, session: str) -> list[dict[str, Any]]:
    return list((await served.gateway.app.sessions.get(f"api:{session}")).messages)


def called(message: Any) -> dict[str, Any]:
    """The assistant message of a completion, as a client puts it back into its history."""
    return message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"})


async def test_a_turn_pauses_on_the_clients_tool_goes_on_with_its_result_and_pauses_again(
    served: Served,
) -> None:
    served.provider.add(
        call("weather", {"city": "Paris"}, "call_paris"),
        call("weather", {"city": "Rome"}, "call_rome"),
        text("Paris 18 °C, Rome 24 °C."),
    )
    client = served.client()
    asked: list[Any] = [{"role": "user", "content": "Paris or Rome today?"}]
    first = await client.chat.completions.create(
        model="nanomem", messages=asked, tools=[WEATHER], extra_body={"session_id": "trip"}
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (paris,) = choice.message.tool_calls or []
    assert (paris.id, paris.function.name) == ("call_paris", "weather")
    assert json.loads(paris.function.arguments) == {"city": "Paris"}
    asked += [called(choice.message), {"role": "tool", "tool_call_id": paris.id, "content": "18"}]
    second = await client.chat.completions.create(
        model="nanomem", messages=asked, tools=[WEATHER], extra_body={"session_id": "trip"}
    )
    (rome,) = second.choices[0].message.tool_calls or []
    assert second.choices[0].finish_reason == "tool_calls" and rome.id == "call_rome"
    asked += [called(second.choices[0].message)]
    asked += [{"role": "tool", "tool_call_id": rome.id, "content": "24"}]
    last = await client.chat.completions.create(
        model="nanomem", messages=asked, tools=[WEATHER], extra_body={"session_id": "trip"}
    )
    assert last.choices[0].finish_reason == "stop"
    assert last.choices[0].message.content == "Paris 18 °C, Rome 24 °C."
    # The model saw both results; the session holds one question, and each result once.
    seen = served.provider.calls[-1]
    assert [client_result(m["content"]) for m in seen if m["role"] == "tool"][-2:] == ["18", "24"]
    offered = served.provider.tools_seen[0] or []
    assert "weather" in [tool["function"]["name"] for tool in offered]
    session = await saved(served, "trip")
    assert [m["role"] for m in session].count("user") == 1
    assert [client_result(m["content"]) for m in session if m["role"] == "tool"] == ["18", "24"]


async def test_streamed_tool_calls_are_assembled_by_the_sdks_stream_helper(
    served: Served,
) -> None:
    long_note = "n" * 1500  # the arguments come in several pieces
    served.provider.add(
        Reply(
            content="Let me look.",
            tool_calls=(
                call("weather", {"city": "Oslo", "note": long_note}, "call_oslo").tool_calls[0],
                call("weather", {"city": "Bergen", "note": None}, "call_bergen").tool_calls[0],
            ),
            finish_reason="tool_calls",
        )
    )
    events: list[str] = []
    async with served.client().chat.completions.stream(
        model="nanomem",
        messages=[{"role": "user", "content": "Oslo and Bergen?"}],
        tools=[STRICT_WEATHER],
        stream_options={"include_usage": True},
        extra_body={"session_id": "streamed-tools"},
    ) as stream:
        async for event in stream:
            events.append(event.type)
        final = await stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me look."
    calls = choice.message.tool_calls or []
    assert [(c.id, c.function.name) for c in calls] == [
        ("call_oslo", "weather"),
        ("call_bergen", "weather"),
    ]
    assert json.loads(calls[0].function.arguments) == {"city": "Oslo", "note": long_note}
    assert calls[1].function.parsed_arguments == {"city": "Bergen", "note": None}
    assert events.count("tool_calls.function.arguments.done") == 2
    assert events.count("tool_calls.function.arguments.delta") >= 4
    assert final.usage is not None and final.usage.completion_tokens > 0


async def test_parse_gets_the_typed_answer_and_the_model_gets_the_schema(served: Served) -> None:
    served.provider.add(text('{"name": "Paris", "celsius": 18}'))
    parsed = await served.client().chat.completions.parse(
        model="nanomem",
        messages=[{"role": "user", "content": "The warmest capital today?"}],
        response_format=City,
        extra_body={"session_id": "typed"},
    )
    assert parsed.choices[0].message.parsed == City(name="Paris", celsius=18)
    wanted = served.provider.options_seen[-1].response_format
    assert wanted["type"] == "json_schema" and wanted["json_schema"]["name"] == "City"
    assert set(wanted["json_schema"]["schema"]["properties"]) == {"name", "celsius"}


async def test_the_model_options_reach_the_model_and_a_cut_answer_says_length(
    served: Served,
) -> None:
    served.provider.add(Reply(content="The first", finish_reason="length"))
    reply = await served.client().chat.completions.create(
        model="nanomem",
        messages=[{"role": "user", "content": "Tell me a long story"}],
        max_tokens=5,
        temperature=0.2,
        top_p=0.9,
        stop=["THE END"],
        seed=7,
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.choices[0].message.content == "The first"
    options = served.provider.options_seen[-1]
    assert (options.max_tokens, options.temperature, options.top_p, options.seed) == (
        5,
        0.2,
        0.9,
        7,
    )
    assert tuple(options.stop) == ("THE END",)


async def test_the_sdks_retries_after_a_model_failure_save_the_message_once(
    served: Served,
) -> None:
    served.provider.add(ProviderError("server", "scripted upstream 500"), text("second time lucky"))
    client = served.client(max_retries=2)  # the SDK's default
    reply = await client.chat.completions.create(
        model="nanomem",
        messages=[{"role": "user", "content": "are you there?"}],
        extra_body={"session_id": "retried"},
    )
    assert reply.choices[0].message.content == "second time lucky"
    assert len(served.provider.calls) == 2  # the first attempt and its retry
    session = await saved(served, "retried")
    users = [m for m in session if m["role"] == "user"]
    assert len(users) == 1, session
    assert session[-1]["content"] == "second time lucky"


async def test_an_idempotency_key_answers_a_repeat_from_the_stored_reply(served: Served) -> None:
    served.provider.add(text("stored answer"))
    client = served.client().with_options(default_headers={"Idempotency-Key": "order-42"})
    asked = [{"role": "user", "content": "place the order"}]
    one = await client.chat.completions.create(
        model="nanomem", messages=asked, extra_body={"session_id": "orders"}
    )
    two = await client.chat.completions.create(
        model="nanomem", messages=asked, extra_body={"session_id": "orders"}
    )
    assert one.choices[0].message.content == two.choices[0].message.content == "stored answer"
    assert len(served.provider.calls) == 1
    assert [m["role"] for m in await saved(served, "orders")] == ["user", "assistant"]


async def test_a_validation_retry_is_the_clients_instruction_not_the_persons_words(
    served: Served,
) -> None:
    feedback = "Validation feedback:\ncelsius must be a number\n\nFix the errors and try again."
    served.provider.add(
        text('{"name": "Oslo", "celsius": "cold"}'), text('{"name": "Oslo", "celsius": 3}')
    )
    asked: list[Any] = [{"role": "user", "content": "The coldest capital?"}]
    first = await served.client().chat.completions.create(
        model="nanomem", messages=asked, extra_body={"session_id": "feedback"}
    )
    asked += [called(first.choices[0].message), {"role": "user", "content": feedback}]
    await served.client().chat.completions.create(
        model="nanomem", messages=asked, extra_body={"session_id": "feedback"}
    )
    prompt = served.provider.calls[-1]
    assert any(m["role"] == "system" and feedback in m["content"] for m in prompt[1:])
    session = json.dumps(await saved(served, "feedback"))
    assert "Fix the errors and try again" not in session


async def test_an_answer_that_never_fits_the_schema_is_a_422(served: Served) -> None:
    served.provider.add(text('{"name": "Paris"}'), text("Paris, 18 degrees"))  # and the re-ask
    with pytest.raises(openai.UnprocessableEntityError) as unmet:
        await served.client().chat.completions.parse(
            model="nanomem",
            messages=[{"role": "user", "content": "The warmest capital today?"}],
            response_format=City,
            extra_body={"session_id": "unmet"},
        )
    assert unmet.value.status_code == 422 and unmet.value.code == "response_format_unmet"
    assert unmet.value.message and "Traceback" not in unmet.value.message
    assert len(served.provider.calls) == 2  # asked once more, then refused


async def test_tool_choice_forces_each_requests_first_model_call_only(served: Served) -> None:
    # As pydantic-ai with an output tool: "required" with every request of the run.
    served.provider.add(
        call("weather", {"city": "Lima"}, "call_lima"),
        call("list_dir", {"path": "memory"}, "call_ours"),
        text("Lima is mild."),
    )
    asked: list[Any] = [{"role": "user", "content": "Lima?"}]
    client = served.client()
    first = await client.chat.completions.create(
        model="nanomem", messages=asked, tools=[WEATHER], tool_choice="required", user="forced"
    )
    (lima,) = first.choices[0].message.tool_calls or []
    asked += [called(first.choices[0].message)]
    asked += [{"role": "tool", "tool_call_id": lima.id, "content": "19"}]
    last = await client.chat.completions.create(
        model="nanomem", messages=asked, tools=[WEATHER], tool_choice="required", user="forced"
    )
    assert last.choices[0].message.content == "Lima is mild."
    assert served.provider.tool_choices == ["required", "required", None]


async def test_a_streamed_structured_answer_shows_only_the_answer_that_fits(
    served: Served,
) -> None:
    served.provider.add(text('{"name": "Quito"}'), text('{"name": "Quito", "celsius": 14}'))
    async with served.client().chat.completions.stream(
        model="nanomem",
        messages=[{"role": "user", "content": "A capital in the Andes?"}],
        response_format=City,
        extra_body={"session_id": "streamed-typed"},
    ) as stream:
        final = await stream.get_final_completion()
    assert final.choices[0].message.parsed == City(name="Quito", celsius=14)


async def test_a_new_message_after_a_result_the_turn_never_got_starts_a_new_turn(
    served: Served,
) -> None:
    # pydantic-ai's tool output: it takes the call's arguments as its answer, and its next run
    # sends the call's result ("Final result processed.") right before the new prompt.
    served.provider.add(call("final_result", {"city": "Lima"}, "call_final"), text("Cusco next."))
    final = {**WEATHER, "function": {**WEATHER["function"], "name": "final_result"}}
    asked: list[Any] = [{"role": "user", "content": "Pick a city"}]
    first = await served.client().chat.completions.create(
        model="nanomem", messages=asked, tools=[final], extra_body={"session_id": "moved-on"}
    )
    asked += [called(first.choices[0].message)]
    asked += [{"role": "tool", "tool_call_id": "call_final", "content": "Final result processed."}]
    asked += [{"role": "user", "content": "And after Lima?"}]
    with log_lines("INFO") as logged:
        second = await served.client().chat.completions.create(
            model="nanomem", messages=asked, tools=[final], extra_body={"session_id": "moved-on"}
        )
    assert second.choices[0].message.content == "Cusco next."
    assert any("1 tool result before the new message in api:moved-on" in line for line in logged)
    session = await saved(served, "moved-on")
    users = [m for m in session if m["role"] == "user"]
    assert len(users) == 2 and users[-1]["content"].endswith("And after Lima?")
    assert session[-1]["content"] == "Cusco next."


async def test_a_retried_continuation_saves_its_results_once(served: Served) -> None:
    served.provider.add(
        call("weather", {"city": "Kyiv"}, "call_kyiv"),
        ProviderError("server", "scripted upstream 500"),
        text("Kyiv: 5 °C."),
    )
    client = served.client(max_retries=2)  # the SDK's default
    asked: list[Any] = [{"role": "user", "content": "Kyiv?"}]
    first = await client.chat.completions.create(
        model="nanomem", messages=asked, tools=[WEATHER], extra_body={"session_id": "kyiv"}
    )
    asked += [called(first.choices[0].message)]
    asked += [{"role": "tool", "tool_call_id": "call_kyiv", "content": "5"}]
    last = await client.chat.completions.create(
        model="nanomem", messages=asked, tools=[WEATHER], extra_body={"session_id": "kyiv"}
    )
    assert last.choices[0].message.content == "Kyiv: 5 °C."
    session = await saved(served, "kyiv")
    assert [client_result(m["content"]) for m in session if m["role"] == "tool"] == ["5"]
    assert [m["role"] for m in session].count("user") == 1


async def test_an_idempotency_key_reused_for_another_message_is_another_turn(
    served: Served,
) -> None:
    # A client that sends one key with every request (a default header) must not be answered
    # its first reply for ever, its later messages never reaching the agent.
    served.provider.add(text("first answer"), text("second answer"))
    client = served.client().with_options(default_headers={"Idempotency-Key": "constant"})
    for words in ("one", "two"):
        await client.chat.completions.create(
            model="nanomem",
            messages=[{"role": "user", "content": words}],
            extra_body={"session_id": "one-key"},
        )
    assert len(served.provider.calls) == 2
    session = await saved(served, "one-key")
    assert [m["content"] for m in session if m["role"] == "assistant"] == [
        "first answer",
        "second answer",
    ]


async def test_a_continuation_streams_its_answer(served: Served) -> None:
    # Longer than what the stream holds back while it might be the start of a secret.
    windy = "Baku is windy today, as it is most days: take a coat and hold on to your hat."
    served.provider.add(call("weather", {"city": "Baku"}, "call_baku"), text(windy))
    asked: list[Any] = [{"role": "user", "content": "Baku?"}]
    first = await served.client().chat.completions.create(
        model="nanomem", messages=asked, tools=[WEATHER], extra_body={"session_id": "baku"}
    )
    asked += [called(first.choices[0].message)]
    asked += [{"role": "tool", "tool_call_id": "call_baku", "content": "windy"}]
    stream = await served.client().chat.completions.create(
        model="nanomem",
        messages=asked,
        tools=[WEATHER],
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"session_id": "baku"},
    )
    chunks = [chunk async for chunk in stream]
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(pieces) == windy and len([p for p in pieces if p]) >= 2
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0  # the result
