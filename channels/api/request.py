"""A chat-completions request body → what the channel hands the core.

The session holds the conversation, so the client's copy of it is not read: the new turn is
what follows the last assistant message, either the person's message(s) or the results of the
client's own tools (`role: tool`, continuing a paused turn). System and developer messages,
wherever they stand, are the client's instructions for this turn (never the person's words),
and so is a framework's own feedback after an answer that failed its validation.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from channels.api.options import (
    checked_response_format,
    checked_tool_choice,
    checked_tools,
    model_options,
    refuse_unsupported,
    retry_identity,
    session_from,
)
from channels.api.wire import BadRequest, ChatRequest, Upload, json_object, message_content
from nanomem.agent import ToolResult

# What a chat-completions request may set; anything else is a 400 naming it, unless it is at
# the value that asks for nothing (options.NO_OP: n 1, logprobs false, ...).
HONOURED = frozenset(
    {
        "model",  # any name: the agent answers (GET /v1/models lists it as nanomem)
        "messages",
        "stream",
        "stream_options",
        "session_id",
        "user",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
    }
)
INSTRUCTING = ("system", "developer")
# A tool call's id as a client echoes it back: ours are short; 256 leaves room for anyone's.
_CALL_ID = re.compile(r"[\x21-\x7e]{1,256}")
# pydantic-ai's RetryPromptPart.model_response() without a tool: "Validation feedback:\n..."
# or "2 validation errors:\n```json\n...", always ending with its request to try again.
_PYDANTIC_AI_END = "\n\nFix the errors and try again."
_PYDANTIC_AI_COUNTED = re.compile(r"\d{1,4} validation errors?:\n```json\n")
# instructor's reasks (its JSON modes, and its tool modes when the model called no tool).
_INSTRUCTOR_STARTS = (
    "Correct your JSON ONLY RESPONSE, based on the following errors:\n",
    "Recall the function correctly, fix the errors, exceptions found\n",
)
_INSTRUCTOR_TOOLS = ("Validation Error found:\n", "\nRecall the function correctly, fix the errors")


@dataclass(frozen=True)
class NewTurn:
    text: str  # the person's new message(s), text parts joined
    uploads: list[Upload] = field(default_factory=list)
    instructions: tuple[str, ...] = ()
    results: tuple[ToolResult, ...] = ()
    superseded: int = 0  # tool results before the person's new message, not read
    # What follows the last assistant message, as sent: a retried request's identity.
    new: list[dict[str, Any]] = field(default_factory=list)


def parse_request(raw: bytes, max_parts: int, headers: Mapping[str, str]) -> ChatRequest:
    """A chat-completions body: its new turn, at most `max_parts` content parts, and what the
    client asks of it."""
    body = json_object(raw)
    refuse_unsupported(body, HONOURED)
    turn = new_turn(body.get("messages"), max_parts)
    tools = checked_tools(body.get("tools"))
    tool_choice = checked_tool_choice(body.get("tool_choice"), tools)
    response_format = checked_response_format(body.get("response_format"))
    stream_options = body.get("stream_options")
    session_id = session_from(body, headers)
    message_id, replayed = retry_identity(headers, session_id, turn.new)
    return ChatRequest(
        session_id=session_id,
        text=turn.text,
        uploads=turn.uploads,
        instructions=turn.instructions,
        results=turn.results,
        superseded=turn.superseded,
        tools=tools,
        tool_choice=tool_choice,
        options=model_options(body, response_format=response_format),
        message_id=message_id,
        replayed=replayed,
        stream=body.get("stream") is True,
        include_usage=isinstance(stream_options, dict)
        and stream_options.get("include_usage") is True,
    )


def new_turn(messages: Any, max_parts: int) -> NewTurn:
    """The new turn of `messages`; BadRequest naming the message that makes it unreadable."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list", param="messages")
    roles = [_role(message, number) for number, message in enumerate(messages)]
    last_answer = max((n for n, role in enumerate(roles) if role == "assistant"), default=-1)
    if last_answer == len(messages) - 1:
        where = f"messages[{last_answer}]"
        raise BadRequest(
            f"{where}, the last message, is the assistant's: the agent writes its own answer, "
            "so the last message must be the user's or a tool's result",
            param=where,
        )
    instructions = [
        text
        for number, role in enumerate(roles)
        if role in INSTRUCTING and (text := _text(messages[number], number, role)).strip()
    ]
    texts: list[str] = []
    uploads: list[Upload] = []
    results: list[ToolResult] = []
    answered: set[str] = set()
    feedback: list[str] = []
    parts = superseded = 0
    for number in range(last_answer + 1, len(messages)):
        message, role, where = messages[number], roles[number], f"messages[{number}]"
        content = message.get("content")
        if role in INSTRUCTING:
            continue
        if role == "tool":
            if texts or uploads:
                raise BadRequest(
                    f"{where}: a tool result after the user's new message; results come "
                    "before it, right after the assistant message that called the tools",
                    param=where,
                )
            results.append(_result(message, number, answered))
        elif role != "user":
            raise BadRequest(
                f"{where} has role {role[:40]!r}; a new turn is user messages or role 'tool' "
                "results",
                param=f"{where}.role",
            )
        elif _is_feedback(content):
            feedback.append(content)
        else:
            # Results, then the person's new message: the results belong to a turn this message
            # ends (pydantic-ai sends its output tool's "Final result processed." so); the core
            # closes that turn as the new message comes, so they are not read.
            superseded += len(results)
            results.clear()
            parts += len(content) if isinstance(content, list) else 0
            if parts > max_parts:
                raise BadRequest(
                    f"{where}.content takes the new messages to {parts} content parts; "
                    f"limit {max_parts}, api.max_parts",
                    param=f"{where}.content",
                )
            text, found = message_content(content, f"{where}.content")
            texts.append(text)
            uploads += found
    text = "\n\n".join(t for t in texts if t)
    if not text.strip() and not uploads and not results and not feedback:
        if "user" in roles[last_answer + 1 :]:
            raise BadRequest("the last user message is empty", param="messages")
        raise BadRequest(
            "the new turn is empty: no user message or tool result follows the last assistant "
            "message",
            param="messages",
        )
    return NewTurn(
        text=text,
        uploads=uploads,
        instructions=(*instructions, *feedback),
        results=tuple(results),
        superseded=superseded,
        new=messages[last_answer + 1 :],
    )


def _role(message: Any, number: int) -> str:
    role = message.get("role") if isinstance(message, dict) else None
    if not isinstance(role, str):
        where = f"messages[{number}]"
        raise BadRequest(f"{where} is not a message (an object with a role)", param=where)
    return role


def _text(message: dict[str, Any], number: int, role: str) -> str:
    """A system, developer or tool message's text: a string, or text parts joined."""
    where = f"messages[{number}].content"
    content = message.get("content")
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for part_number, part in enumerate(content if isinstance(content, list) else [None]):
        if not isinstance(part, dict) or part.get("type") != "text":
            at = f"{where}[{part_number}]" if isinstance(content, list) else where
            raise BadRequest(
                f"{at}: a {role} message's content is a string or text parts", param=at
            )
        if not isinstance(part.get("text"), str):
            at = f"{where}[{part_number}]"
            raise BadRequest(f"{at}: a text part needs 'text', a string", param=at)
        texts.append(part["text"])
    return "\n\n".join(texts)


def _result(message: dict[str, Any], number: int, answered: set[str]) -> ToolResult:
    where = f"messages[{number}]"
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or not _CALL_ID.fullmatch(call_id):
        raise BadRequest(
            f"{where}: a tool result needs tool_call_id, the id of the call it answers",
            param=f"{where}.tool_call_id",
        )
    if call_id in answered:
        raise BadRequest(
            f"{where}: a second result for the tool call {call_id[:64]!r}",
            param=f"{where}.tool_call_id",
        )
    answered.add(call_id)
    return ToolResult(call_id, _text(message, number, "tool"))


def _is_feedback(content: Any) -> bool:
    """Whether a user message is a framework's retry prompt rather than the person's words."""
    if not isinstance(content, str):
        return False
    if content.endswith(_PYDANTIC_AI_END) and (
        content.startswith("Validation feedback:\n") or _PYDANTIC_AI_COUNTED.match(content)
    ):
        return True
    start, middle = _INSTRUCTOR_TOOLS
    return content.startswith(_INSTRUCTOR_STARTS) or (
        content.startswith(start) and middle in content
    )
