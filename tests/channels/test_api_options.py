"""What a request asks of its turn, checked (channels/api/options.py): what OpenAI accepts
comes through as given, what it refuses is a BadRequest naming the parameter."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from channels.api.options import (
    MAX_SCHEMA_CHARS,
    MAX_SCHEMA_DEPTH,
    MAX_TOOLS,
    checked_response_format,
    checked_tool_choice,
    checked_tools,
    model_options,
    refuse_unsupported,
    retry_identity,
    session_from,
)
from channels.api.wire import BadRequest
from nanomem.agent import ModelOptions
from tests.helpers.client_turns import WEATHER


def refused(call: Any, *args: Any, **kwargs: Any) -> BadRequest:
    with pytest.raises(BadRequest) as caught:
        call(*args, **kwargs)
    return caught.value


def test_function_tools_come_through_as_given() -> None:
    assert checked_tools([WEATHER]) == (WEATHER,)
    assert checked_tools(None) == ()
    bare = {"type": "function", "function": {"name": "now"}}
    assert checked_tools([bare]) == (bare,)


@pytest.mark.parametrize(
    ("tools", "param", "words"),
    [
        ({"type": "function"}, "tools", "must be a list"),
        ([{"type": "web_search"}], "tools[0]", "'web_search' tool"),
        ([{"type": "function", "function": {"name": "a b"}}], "tools[0].function.name", "1-64"),
        ([{"type": "function", "function": {"name": "x" * 65}}], "tools[0].function.name", "1-64"),
        ([WEATHER, WEATHER], "tools[1]", "given twice"),
        (
            [{"type": "function", "function": {"name": "f", "parameters": []}}],
            "tools[0].function.parameters",
            "JSON Schema object",
        ),
        (
            [{"type": "function", "function": {"name": "f", "strict": "yes"}}],
            "tools[0].function.strict",
            "true or false",
        ),
        (
            [{"type": "function", "function": {"name": "f", "extra": 1}}],
            "tools[0].function.extra",
            "unknown field",
        ),
    ],
)
def test_a_tool_that_is_not_a_function_tool_is_refused_by_name(
    tools: Any, param: str, words: str
) -> None:
    error = refused(checked_tools, tools)
    assert error.param == param
    assert words in str(error)


def test_too_many_or_too_large_tools_are_refused_quickly() -> None:
    many = [{"type": "function", "function": {"name": f"t{i}"}} for i in range(MAX_TOOLS + 1)]
    assert "at most 128" in str(refused(checked_tools, many))
    huge = {"type": "object", "description": "x" * MAX_SCHEMA_CHARS}
    big = [{"type": "function", "function": {"name": "f", "parameters": huge}}]
    started = time.perf_counter()
    assert "larger than" in str(refused(checked_tools, big))
    assert time.perf_counter() - started < 1.0
    near = {"type": "object", "description": "x" * (MAX_SCHEMA_CHARS - 100)}
    several = [
        {"type": "function", "function": {"name": f"f{i}", "parameters": near}} for i in range(5)
    ]
    assert "come to more than" in str(refused(checked_tools, several))


def nested(levels: int) -> dict[str, Any]:
    """A schema of `levels` levels of JSON nesting (each property adds two)."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels // 2 - 1):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


def test_a_schema_nested_too_deep_is_refused_where_it_is() -> None:
    fine = [{"type": "function", "function": {"name": "f", "parameters": nested(MAX_SCHEMA_DEPTH)}}]
    assert checked_tools(fine)[0]["function"]["parameters"] == nested(MAX_SCHEMA_DEPTH)
    deep = nested(MAX_SCHEMA_DEPTH + 2)
    tools = [{"type": "function", "function": {"name": "f", "parameters": deep}}]
    error = refused(checked_tools, tools)
    assert error.param == "tools[0].function.parameters" and "deeper than 32" in str(error)
    wanted = {"type": "json_schema", "json_schema": {"name": "N", "schema": deep}}
    error = refused(checked_response_format, wanted)
    assert error.param == "response_format.json_schema.schema"


def test_tool_choice_is_a_mode_or_one_of_the_clients_tools() -> None:
    tools = checked_tools([WEATHER])
    assert checked_tool_choice("auto", tools) == "auto"
    assert checked_tool_choice("none", ()) == "none"
    assert checked_tool_choice("required", tools) == "required"
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert checked_tool_choice(named, tools) == named
    assert "no tools" in str(refused(checked_tool_choice, "required", ()))
    other = {"type": "function", "function": {"name": "read_file"}}
    assert "not among the request's tools" in str(refused(checked_tool_choice, other, tools))
    assert refused(checked_tool_choice, "always", tools).param == "tool_choice"


def test_response_format_json_schema_and_json_object() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    given = {"type": "json_schema", "json_schema": {"name": "N", "schema": schema, "strict": True}}
    assert checked_response_format(given) == given
    assert checked_response_format({"type": "json_object"}) == {"type": "json_object"}
    assert checked_response_format({"type": "text"}) is None
    assert checked_response_format(None) is None
    assert "'text', 'json_object'" in str(refused(checked_response_format, {"type": "xml"}))
    nameless = {"type": "json_schema", "json_schema": {"schema": schema}}
    assert refused(checked_response_format, nameless).param == "response_format.json_schema.name"
    huge = {"type": "object", "description": "x" * MAX_SCHEMA_CHARS}
    big = {"type": "json_schema", "json_schema": {"name": "N", "schema": huge}}
    assert "larger than" in str(refused(checked_response_format, big))


def test_model_options_in_range_reach_the_model() -> None:
    body = {
        "max_completion_tokens": 50,
        "temperature": 0.2,
        "top_p": 1,
        "stop": "END",
        "seed": 7,
        "presence_penalty": -2,
        "frequency_penalty": 2.0,
        "parallel_tool_calls": False,
    }
    assert model_options(body, {"type": "json_object"}) == ModelOptions(
        max_tokens=50,
        temperature=0.2,
        top_p=1.0,
        stop=("END",),
        seed=7,
        presence_penalty=-2.0,
        frequency_penalty=2.0,
        parallel_tool_calls=False,
        response_format={"type": "json_object"},
    )
    assert model_options({"max_tokens": 5, "stop": ["a", "b"]}) == ModelOptions(
        max_tokens=5, stop=("a", "b")
    )
    assert model_options({"temperature": None}) == ModelOptions()


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"temperature": 2.5}, "temperature", "Expected a value <= 2, but got 2.5"),
        ({"temperature": -1}, "temperature", "decimal below minimum value"),
        ({"top_p": 1.5}, "top_p", "decimal above maximum value"),
        ({"temperature": "hot"}, "temperature", "expected a number"),
        ({"temperature": True}, "temperature", "expected a number"),
        ({"max_tokens": 0}, "max_tokens", "integer below minimum value"),
        ({"max_completion_tokens": 1.5}, "max_completion_tokens", "expected an integer"),
        ({"max_tokens": 5, "max_completion_tokens": 6}, "max_tokens", "differ"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "at most 4"),
        ({"stop": [""]}, "stop", "non-empty"),
        ({"seed": 2**64}, "seed", "integer above maximum value"),
        ({"parallel_tool_calls": "yes"}, "parallel_tool_calls", "true or false"),
    ],
)
def test_model_options_out_of_range_are_refused_as_openai_words_it(
    body: dict[str, Any], param: str, words: str
) -> None:
    error = refused(model_options, body)
    assert error.param == param
    assert words in str(error)


HONOURED = frozenset({"model", "messages", "temperature"})


def test_unsupported_parameters_are_refused_by_name_unless_they_ask_for_nothing() -> None:
    refuse_unsupported(
        {"model": "x", "n": 1, "logprobs": False, "store": True, "modalities": ["text"]},
        HONOURED,
    )
    refuse_unsupported({"logit_bias": None}, HONOURED)
    n = refused(refuse_unsupported, {"n": 3}, HONOURED)
    assert (n.param, n.status) == ("n", 400)
    assert "one answer per turn" in str(n)
    assert refused(refuse_unsupported, {"logprobs": True}, HONOURED).param == "logprobs"
    unknown = refused(refuse_unsupported, {"frobnicate": 1}, HONOURED)
    assert str(unknown) == "Unrecognized request argument supplied: frobnicate"


def test_the_session_comes_from_the_body_then_the_header() -> None:
    assert session_from({"session_id": "a", "user": "b"}, {"X-Session-Id": "c"}) == "a"
    assert session_from({"user": "b"}, {"X-Session-Id": "c"}) == "b"
    assert session_from({}, {"X-Session-Id": "c"}) == "c"
    assert session_from({"session_id": ""}, {}) == "default"
    assert refused(session_from, {}, {"X-Session-Id": "-1"}).param == "X-Session-Id"
    assert refused(session_from, {"user": "a/b"}, {}).param == "user"


def test_every_attempt_of_one_request_has_one_identity() -> None:
    new = [{"role": "user", "content": "hi"}]
    first, first_retry = retry_identity({}, "s", new)
    again, retried = retry_identity(
        {"x-stainless-retry-count": "1"}, "s", json.loads(json.dumps(new))
    )
    assert first == again and first.startswith("api-")
    assert (first_retry, retried) == (False, True)
    assert retry_identity({}, "other", new)[0] != first  # another session: another message
    keyed, is_retry = retry_identity({"Idempotency-Key": "k1"}, "s", new)
    assert is_retry and keyed != first
    assert retry_identity({"Idempotency-Key": "k1"}, "s", json.loads(json.dumps(new)))[0] == keyed
    assert retry_identity({"Idempotency-Key": "k1"}, "s", [{"changed": 1}])[0] != keyed
    assert retry_identity({"x-stainless-retry-count": "zero"}, "s", new)[1] is False
    assert refused(retry_identity, {"Idempotency-Key": "k" * 257}, "s", new).status == 400
