"""A chat-completions body → the new turn (channels/api/request.py): the client's copy of the
conversation is not read, its system messages are its instructions, tool results continue a
paused turn, and a retried request keeps its message's id."""

from __future__ import annotations

import json
from typing import Any

import pytest

from channels.api.request import parse_request
from channels.api.wire import BadRequest, ChatRequest
from nanomem.agent import ToolResult

# What pydantic-ai 2.x sends after an answer that failed its output validation
# (RetryPromptPart.model_response() without a tool name), in both of its forms.
PYDANTIC_AI_ERRORS = (
    '1 validation error:\n```json\n[\n  {\n    "type": "missing",\n    "loc": [\n      "city"\n'
    '    ],\n    "msg": "Field required"\n  }\n]\n```\n\nFix the errors and try again.'
)
PYDANTIC_AI_FEEDBACK = (
    "Validation feedback:\nthe city must be in Europe\n\nFix the errors and try again."
)
INSTRUCTOR_JSON = (
    "Correct your JSON ONLY RESPONSE, based on the following errors:\n1 validation error for City"
)


def parsed(*messages: dict[str, Any], headers: dict[str, str] | None = None) -> ChatRequest:
    return parse_request(json.dumps({"messages": list(messages)}).encode(), 16, headers or {})


def refused(*messages: dict[str, Any]) -> BadRequest:
    with pytest.raises(BadRequest) as caught:
        parsed(*messages)
    assert caught.value.status == 400
    return caught.value


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def answer(content: str = "an earlier answer", **more: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content, **more}


def tool(call_id: Any, content: Any) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


CALLED = answer(
    "",
    tool_calls=[
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": "{}"}},
    ],
)


def test_the_new_turn_is_every_user_message_after_the_last_answer() -> None:
    request = parsed(user("old question"), answer(), user("first line"), user("second line"))
    assert request.text == "first line\n\nsecond line"
    assert request.instructions == () and request.results == ()


def test_system_and_developer_messages_anywhere_are_the_clients_instructions() -> None:
    request = parsed(
        {"role": "system", "content": "You are a JSON machine."},
        user("old"),
        answer(),
        {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
        user("new"),
        {"role": "system", "content": "   "},  # nothing to say: left out
    )
    assert request.instructions == ("You are a JSON machine.", "Be brief.")
    assert request.text == "new"  # never the person's words


def test_tool_results_continue_the_turn_and_carry_no_text() -> None:
    request = parsed(
        user("look it up"),
        CALLED,
        tool("call_1", "sunny"),
        tool("call_2", [{"type": "text", "text": "12"}, {"type": "text", "text": "degrees"}]),
    )
    assert request.results == (ToolResult("call_1", "sunny"), ToolResult("call_2", "12\n\ndegrees"))
    assert request.text == "" and request.size == len("sunny") + len("12\n\ndegrees")


@pytest.mark.parametrize("feedback", [PYDANTIC_AI_ERRORS, PYDANTIC_AI_FEEDBACK, INSTRUCTOR_JSON])
def test_a_frameworks_validation_feedback_is_its_instructions_not_the_persons_words(
    feedback: str,
) -> None:
    request = parsed(
        {"role": "system", "content": "Answer as JSON."}, user("Paris?"), answer(), user(feedback)
    )
    assert request.text == ""
    assert request.instructions == ("Answer as JSON.", feedback)


def test_a_person_who_writes_like_feedback_is_still_heard() -> None:
    words = "Fix the errors and try again."
    assert parsed(user(words)).text == words
    assert parsed(user("Validation feedback: was it good?")).text.startswith("Validation")


def test_a_retried_request_keeps_its_id_and_says_it_may_be_one() -> None:
    messages = (user("old"), answer(), user("new"))
    first = parsed(*messages, headers={"x-stainless-retry-count": "0"})
    again = parsed(*messages, headers={"x-stainless-retry-count": "2"})
    assert first.message_id == again.message_id and first.message_id.startswith("api-")
    assert not first.replayed and again.replayed
    other = parsed(user("old"), answer(), user("newer"), headers={"x-stainless-retry-count": "1"})
    assert other.message_id != first.message_id


def test_an_idempotency_key_names_one_request_with_its_messages() -> None:
    one = parsed(user("a"), headers={"Idempotency-Key": "k-1"})
    again = parsed(user("a"), headers={"Idempotency-Key": "k-1"})
    assert one.replayed and again.replayed and one.message_id == again.message_id
    assert parsed(user("b"), headers={"Idempotency-Key": "k-1"}).message_id != one.message_id
    assert parsed(user("a"), headers={"Idempotency-Key": "k-2"}).message_id != one.message_id
    assert parsed(user("a")).message_id != one.message_id


@pytest.mark.parametrize(
    ("messages", "param", "words"),
    [
        ((user("hi"), answer("Sure, ")), "messages[1]", "is the assistant's"),
        ((user("hi"), CALLED, tool("", "x")), "messages[2].tool_call_id", "needs tool_call_id"),
        ((user("hi"), CALLED, tool(7, "x")), "messages[2].tool_call_id", "needs tool_call_id"),
        (
            (user("hi"), CALLED, tool("call_1", "x"), tool("call_1", "y")),
            "messages[3].tool_call_id",
            "a second result",
        ),
        (
            (user("hi"), CALLED, tool("call_1", [{"type": "image_url", "image_url": {}}])),
            "messages[2].content[0]",
            "text parts",
        ),
        ((user("hi"), CALLED, user("and"), tool("call_1", "x")), "messages[3]", "after the user"),
        ((user("hi"), answer(), {"role": "function", "content": "x"}), "messages[2].role", "role"),
        ((user("hi"), "not a message"), "messages[1]", "not a message"),
        (({"role": "system", "content": "only rules"},), "messages", "empty"),
        (
            ({"role": "system", "content": {"text": "x"}}, user("hi")),
            "messages[0].content",
            "string",
        ),
    ],
)
def test_an_unreadable_turn_is_a_400_naming_the_message(
    messages: tuple[Any, ...], param: str, words: str
) -> None:
    error = refused(*messages)
    assert error.param == param and words in str(error)


def test_results_before_the_persons_new_message_belong_to_the_turn_it_ends() -> None:
    # pydantic-ai's next run sends its output tool's result back before the new prompt.
    request = parsed(user("hi"), CALLED, tool("call_1", "Final result processed."), user("next"))
    assert request.text == "next" and request.results == () and request.superseded == 1


def test_content_parts_count_across_the_new_messages() -> None:
    eight = [{"type": "text", "text": "x"}] * 8
    assert parsed(user(eight), user(eight)).text  # 16: the limit
    error = refused(user(eight), user(eight), user([{"type": "text", "text": "one more"}]))
    assert "17 content parts; limit 16, api.max_parts" in str(error)
    assert error.param == "messages[2].content"
