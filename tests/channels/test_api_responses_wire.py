"""A Responses API request read: its new turn, its tools and text format in the chat shape the
core takes, its session from a response id, and what is refused (channels/api/responses_*)."""

from __future__ import annotations

import json
import secrets
from typing import Any

import pytest

from channels.api.responses_input import MAX_ITEMS, new_turn
from channels.api.responses_wire import ResponsesRequest, parse_responses, response_id, session_of
from channels.api.wire import BadRequest
from nanomem.agent.client_turn import ToolResult
from tests.helpers.client_turns import FLAT_WEATHER


def parse(body: dict[str, Any], headers: dict[str, str] | None = None) -> ResponsesRequest:
    return parse_responses(json.dumps(body).encode(), headers or {}, max_parts=16)


def refused(body: dict[str, Any], headers: dict[str, str] | None = None) -> BadRequest:
    with pytest.raises(BadRequest) as caught:
        parse(body, headers)
    return caught.value


def test_a_string_input_is_the_person_s_message() -> None:
    parsed = parse({"model": "nanomem", "input": "hello"})
    assert parsed.turn.text == "hello" and parsed.session_id == "default"
    assert parsed.tools == () and parsed.follows == "" and not parsed.stream


def test_the_new_turn_is_what_follows_the_last_assistant_item() -> None:
    turn = new_turn(
        [
            {"role": "user", "content": "old"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text"}]},
            {"role": "user", "content": [{"type": "input_text", "text": "new one"}]},
            {"role": "user", "content": "and two"},
        ],
        None,
        16,
    )
    assert turn.text == "new one\n\nand two" and turn.results == ()


def test_results_after_the_calls_are_the_new_turn() -> None:
    turn = new_turn(
        [
            {"role": "user", "content": "weather in Paris and Rome?"},
            {
                "type": "function_call",
                "call_id": "call_a",
                "name": "get_weather",
                "arguments": "{}",
            },
            {
                "type": "function_call",
                "call_id": "call_b",
                "name": "get_weather",
                "arguments": "{}",
            },
            {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
            {
                "type": "function_call_output",
                "call_id": "call_b",
                "output": [{"type": "input_text", "text": "rain"}],
            },
        ],
        None,
        16,
    )
    assert turn.text == "" and turn.uploads == []
    assert turn.results == (ToolResult("call_a", "sunny"), ToolResult("call_b", "rain"))


def test_instructions_and_system_messages_anywhere_are_the_client_s_instructions() -> None:
    turn = new_turn(
        [
            {"role": "system", "content": "Be terse."},
            {"role": "assistant", "content": "earlier"},
            {"role": "developer", "content": [{"type": "input_text", "text": "Use metric."}]},
            {"role": "user", "content": "how far is it?"},
        ],
        "Answer in French.",
        16,
    )
    assert turn.instructions == ("Answer in French.", "Be terse.", "Use metric.")
    assert turn.text == "how far is it?"


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("   ", "'input' is empty"),
        ([], "non-empty list"),
        ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}], "nothing new"),
        (["hi"], "input[0] is not an input item"),
        ([{"role": "tool", "content": "x"}], "input[0].role must be"),
        ([{"type": "item_reference", "id": "msg_1"}], "'item_reference' item"),
        (
            [
                {"type": "function_call_output", "call_id": "c", "output": "x"},
                {"role": "user", "content": "y"},
            ],
            "results, then the message",
        ),
        ([{"type": "function_call_output", "call_id": "", "output": "x"}], "input[0].call_id"),
        ([{"type": "function_call_output", "call_id": "c" * 300, "output": "x"}], "call_id"),
        ([{"type": "function_call_output", "call_id": "c", "output": 3}], "input[0].output"),
        (
            [{"role": "user", "content": [{"type": "input_image", "file_id": "file_1"}]}],
            "by file_id",
        ),
        (
            [{"role": "user", "content": [{"type": "input_image", "image_url": "ftp://x/y.png"}]}],
            "data URL",
        ),
        ([{"role": "user", "content": [{"type": "input_audio"}]}], "'input_audio' part"),
        ([{"role": "system", "content": [{"type": "input_image"}]}], "input_text parts only"),
    ],
)
def test_bad_input_is_a_400_saying_what(value: Any, words: str) -> None:
    with pytest.raises(BadRequest) as caught:
        new_turn(value, None, 16)
    assert words in str(caught.value)


def test_too_many_items_or_parts_are_refused_before_any_is_read() -> None:
    with pytest.raises(BadRequest, match=f"limit {MAX_ITEMS}"):
        new_turn([{"role": "user", "content": "x"}] * (MAX_ITEMS + 1), None, 16)
    parts = [{"type": "input_text", "text": "x"}] * 17
    with pytest.raises(BadRequest, match=r"api\.max_parts"):
        new_turn([{"role": "user", "content": parts}], None, 16)


def test_function_tools_take_the_chat_shape() -> None:
    parsed = parse(
        {
            "input": "hi",
            "tools": [FLAT_WEATHER],
            "tool_choice": {"type": "function", "name": "get_weather"},
        }
    )
    [tool] = parsed.tools
    assert tool == {
        "type": "function",
        "function": {k: v for k, v in FLAT_WEATHER.items() if k != "type"},
    }
    assert parsed.tool_choice == {"type": "function", "function": {"name": "get_weather"}}


@pytest.mark.parametrize(
    ("tools", "param"),
    [
        ([{"type": "web_search"}], "tools[0].type"),
        ([FLAT_WEATHER, {"type": "mcp", "server_label": "x"}], "tools[1].type"),
        ([{**FLAT_WEATHER, "defer_loading": True}], "tools[0].defer_loading"),
        (["get_weather"], "tools[0].type"),
    ],
)
def test_only_function_tools_are_taken(tools: list[Any], param: str) -> None:
    assert refused({"input": "hi", "tools": tools}).param == param


def test_text_format_takes_the_chat_shape_of_response_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    form = {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}
    parsed = parse({"input": "hi", "text": {"format": form}})
    expected = {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema, "strict": True},
    }
    assert parsed.options.response_format == expected
    assert parsed.echo["text"]["format"] == form
    assert parse(
        {"input": "hi", "text": {"format": {"type": "json_object"}}}
    ).options.response_format == {"type": "json_object"}
    assert (
        parse({"input": "hi", "text": {"format": {"type": "text"}}}).options.response_format is None
    )


def test_the_options_reach_the_model_options() -> None:
    parsed = parse(
        {
            "input": "hi",
            "max_output_tokens": 50,
            "temperature": 0.5,
            "top_p": 0.8,
            "parallel_tool_calls": False,
        }
    )
    options = parsed.options
    assert (options.max_tokens, options.temperature, options.top_p) == (50, 0.5, 0.8)
    assert options.parallel_tool_calls is False


def test_what_the_agents_sdk_sends_by_default_is_taken() -> None:
    # openai-agents' OpenAIResponsesModel: include always, tools as it converts them.
    parse(
        {
            "model": "gpt-4.1",
            "input": [{"content": "hi", "role": "user"}],
            "include": [],
            "tools": [FLAT_WEATHER],
            "instructions": "You are a helpful agent.",
            "store": False,
            "truncation": "auto",
            "reasoning": {"effort": None, "summary": None},
            "prompt_cache_key": "agent-1",
            "text": {"format": {"type": "text"}, "verbosity": "medium"},
        }
    )


def test_a_response_id_carries_its_session() -> None:
    for session in ("default", "a", "user@example.com", "x_y-z.1+2=3", "s" * 128):
        rid = response_id(session, secrets.token_hex(16))
        assert rid.startswith("resp_") and session_of(rid) == session
    assert response_id("chat", "0" * 32) != response_id("chat", "1" * 32)


@pytest.mark.parametrize(
    "forged",
    [
        "resp_nonsense",
        "resp_" + "A" * 10 + "_" + "0" * 32,  # no session's name
        response_id("chat", "0" * 32)[:-1] + "G",
        response_id("chat", "0" * 32) + "0",
        response_id("-1", "0" * 32),  # no session id starts with -
        "resp_" + "x" * 10_000,
        "",
        7,
        {},
    ],
)
def test_what_no_response_id_is_is_refused(forged: Any) -> None:
    with pytest.raises(BadRequest) as caught:
        session_of(forged)
    assert caught.value.param == "previous_response_id"
    assert refused({"input": "hi", "previous_response_id": forged}).param == "previous_response_id"


def test_previous_response_id_chooses_the_session_unless_another_is_named() -> None:
    earlier = response_id("work", "0" * 32)
    assert parse({"input": "go on", "previous_response_id": earlier}).session_id == "work"
    assert (
        parse({"input": "go on", "previous_response_id": earlier, "user": "work"}).follows
        == earlier
    )
    for named in ({"session_id": "home"}, {"user": "home"}):
        bad = refused({"input": "go on", "previous_response_id": earlier, **named})
        assert bad.param == "previous_response_id"
    bad = refused({"input": "go on", "previous_response_id": earlier}, {"X-Session-Id": "home"})
    assert bad.param == "previous_response_id"


def test_the_session_comes_from_session_id_user_or_the_header() -> None:
    assert parse({"input": "x", "session_id": "a"}).session_id == "a"
    assert parse({"input": "x", "user": "b"}).session_id == "b"
    assert parse({"input": "x"}, {"X-Session-Id": "c"}).session_id == "c"


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"stream": "yes"}, "stream"),
        ({"store": "no"}, "store"),
        ({"truncation": "sometimes"}, "truncation"),
        ({"include": "all"}, "include"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"metadata": {str(n): "v" for n in range(17)}}, "metadata"),
        ({"metadata": {"k" * 65: "v"}}, "metadata"),
        ({"text": {"format": {"type": "yaml"}}}, "text.format"),
        ({"text": "json"}, "text"),
        ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"max_tool_calls": 3}, "max_tool_calls"),
        ({"instructions": ["a"]}, "instructions"),
    ],
)
def test_parameters_are_checked(extra: dict[str, Any], param: str) -> None:
    assert refused({"input": "hi", **extra}).param == param
