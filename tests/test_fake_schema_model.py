"""The model-like fake (tests/fakes/schema_model.py) through the openai SDK and the real HTTP
wire of FakeOpenAI: schemas filled validly, tools called when told, results quoted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.schema_model import SchemaModel, fill, planned_steps

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
            "required": ["city", "days"],
        },
    },
}
CLOCK = {"type": "function", "function": {"name": "clock", "parameters": {"type": "object"}}}


class Stop(BaseModel):
    name: str
    kind: Literal["museum", "park"]
    minutes: int = Field(ge=15, le=240)


class Trip(BaseModel):
    city: str
    when: str = Field(json_schema_extra={"format": "date"})
    stops: list[Stop] = Field(min_length=2)
    budget: float | None = Field(gt=0, le=1000)
    note: str | None = None
    tags: list[str] = Field(default_factory=list, json_schema_extra={"uniqueItems": True})


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        server.set_fallback(SchemaModel({"city": "Paris"}))
        yield server


def client(fake: FakeOpenAI) -> openai.OpenAI:
    return openai.OpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0)


def ask(fake: FakeOpenAI, text: str, **kw: Any) -> Any:
    messages = kw.pop("messages", [{"role": "user", "content": text}])
    return client(fake).chat.completions.create(model="fake", messages=messages, **kw)


def test_fill_gives_a_valid_instance_of_refs_unions_enums_bounds_and_formats() -> None:
    schema = Trip.model_json_schema()
    trip = fill(schema, {"city": "Paris", "minutes": 5})
    jsonschema.validate(trip, schema, format_checker=jsonschema.FormatChecker())
    assert trip["city"] == "Paris"  # a value given where it fits; 5 minutes does not fit
    assert len(trip["stops"]) == 2 and trip["stops"][0]["minutes"] == 15
    assert trip["budget"] > 0 and trip["when"] == "2026-01-02"
    recursive = {
        "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
        "$ref": "#/$defs/Node",
    }
    jsonschema.validate(fill(recursive), recursive)  # a recursive schema ends
    assert fill({"const": 3}) == 3 and fill({"type": ["null", "integer"], "maximum": -4}) == -4


def test_response_format_json_schema_is_answered_by_an_instance() -> None:
    with FakeOpenAI() as fake:
        fake.set_fallback(SchemaModel({"city": "Paris"}))
        parsed = client(fake).chat.completions.parse(
            model="fake", messages=[{"role": "user", "content": "plan"}], response_format=Trip
        )
    trip = parsed.choices[0].message.parsed
    assert isinstance(trip, Trip) and trip.city == "Paris"


def test_json_object_fills_a_schema_from_the_system_message(fake: FakeOpenAI) -> None:
    system = "Answer in JSON matching this json_schema:\n\n" + json.dumps(Trip.model_json_schema())
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "plan"}]
    reply = ask(fake, "", messages=messages, response_format={"type": "json_object"})
    assert Trip.model_validate_json(reply.choices[0].message.content).city == "Paris"
    plain = ask(fake, "plan", response_format={"type": "json_object"})
    assert json.loads(plain.choices[0].message.content) == {"city": "Paris", "answer": "plan"}


def test_a_tool_is_called_when_the_user_says_so_and_its_result_quoted(fake: FakeOpenAI) -> None:
    said = 'use get_weather {"city": "Oslo", "days": 2} then use clock and get_weather'
    first = ask(fake, said, tools=[WEATHER, CLOCK]).choices[0]
    assert first.finish_reason == "tool_calls"
    (call,) = first.message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "get_weather",
        {"city": "Oslo", "days": 2},
    )
    history: list[Any] = [
        {"role": "user", "content": said},
        first.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"},
    ]
    second = ask(fake, "", messages=history, tools=[WEATHER, CLOCK]).choices[0]
    names = [c.function.name for c in second.message.tool_calls]
    assert names == ["clock", "get_weather"]  # the second clause: one step with two calls
    assert json.loads(second.message.tool_calls[1].function.arguments) == {
        "city": "Paris",  # filled from the values given, the rest from the schema
        "days": 1,
    }
    history += [second.message.model_dump(exclude_none=True)] + [
        {"role": "tool", "tool_call_id": c.id, "content": f"result {i}"}
        for i, c in enumerate(second.message.tool_calls)
    ]
    third = ask(fake, "", messages=history, tools=[WEATHER, CLOCK]).choices[0]
    assert (third.finish_reason, third.message.content) == (
        "stop",
        "tool said: result 0 | result 1",
    )


def test_tool_choice_forces_a_call_and_plain_text_is_echoed(fake: FakeOpenAI) -> None:
    named = {"type": "function", "function": {"name": "clock"}}
    forced = ask(fake, "what time is it", tools=[WEATHER, CLOCK], tool_choice=named)
    assert forced.choices[0].message.tool_calls[0].function.name == "clock"
    required = ask(fake, "weather?", tools=[WEATHER], tool_choice="required")
    assert required.choices[0].message.tool_calls[0].function.name == "get_weather"
    # A tool not offered is no call: "use" is only an instruction for an offered one.
    assert ask(fake, "use get_weather", tools=[CLOCK]).choices[0].message.content == (
        "echo: use get_weather"
    )


def test_unasked_tools_are_called_once_a_turn() -> None:
    with FakeOpenAI() as fake:
        fake.set_fallback(SchemaModel({"city": "Rome"}, unasked={"get_weather"}))
        first = ask(fake, "What should I wear?", tools=[WEATHER, CLOCK]).choices[0].message
        (call,) = first.tool_calls or []
        assert json.loads(call.function.arguments) == {"city": "Rome", "days": 1}
        history: list[Any] = [
            {"role": "user", "content": "What should I wear?"},
            first.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "rain"},
        ]
        then = ask(fake, "", messages=history, tools=[WEATHER, CLOCK]).choices[0].message
        assert then.content == "tool said: rain"


def test_a_model_without_structured_output_refuses_response_format() -> None:
    with FakeOpenAI() as fake:
        fake.set_fallback(SchemaModel(native=False))
        with pytest.raises(openai.BadRequestError, match="response_format"):
            ask(fake, "plan", response_format={"type": "json_object"})


def test_planned_steps_reads_clauses_and_arguments() -> None:
    text = 'please use a {"x": 1} and b, then use c; use zzz'
    assert planned_steps(text, {"a", "b", "c"}) == [[("a", {"x": 1}), ("b", None)], [("c", None)]]


def test_a_text_past_max_tokens_is_cut_with_finish_reason_length(fake: FakeOpenAI) -> None:
    cut = ask(fake, "a long story about the sea", max_tokens=2).choices[0]
    assert (cut.message.content, cut.finish_reason) == ("echo: a ", "length")
    whole = ask(fake, "short", max_tokens=100).choices[0]
    assert (whole.message.content, whole.finish_reason) == ("echo: short", "stop")


def test_a_result_inside_nanomems_markers_is_read_as_its_text(fake: FakeOpenAI) -> None:
    marked = (
        "<<untrusted 0c9c2d40 from the API client's tool weather>>\nsunny\n"
        "<<end untrusted 0c9c2d40>>\n(The text above is content from outside.)"
    )
    call = {"id": "c1", "type": "function", "function": {"name": "clock", "arguments": "{}"}}
    history: list[Any] = [
        {"role": "user", "content": "use clock"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": marked},
    ]
    assert ask(fake, "", messages=history, tools=[CLOCK]).choices[0].message.content == (
        "tool said: sunny"
    )
