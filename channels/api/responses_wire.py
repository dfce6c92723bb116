"""A Responses API request (`POST /v1/responses`): its parameters checked and turned into what
a ClientTurn takes, and the response ids, which carry their session (no table to keep)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from channels.api.options import (
    SESSION_HEADER,
    checked_response_format,
    checked_tool_choice,
    checked_tools,
    model_options,
    refuse_unsupported,
    retry_identity,
    session_from,
)
from channels.api.responses_input import NewTurn, new_turn
from channels.api.wire import BadRequest, json_object, valid_session_id
from nanomem.agent import ModelOptions

# Read and honoured (`store`: the session keeps every turn, whatever it says; `include`,
# `reasoning`, `truncation`, `prompt_cache_key`, `stream_options` at what changes nothing).
HONOURED = frozenset(
    {
        "model",
        "input",
        "instructions",
        "previous_response_id",
        "session_id",
        "user",
        "tools",
        "tool_choice",
        "text",
        "max_output_tokens",
        "temperature",
        "top_p",
        "parallel_tool_calls",
        "store",
        "metadata",
        "stream",
        "stream_options",
        "reasoning",
        "include",
        "truncation",
        "prompt_cache_key",
    }
)
FUNCTION_FIELDS = ("type", "name", "description", "parameters", "strict")
# What `include` may ask without changing anything: no reasoning item is ever returned.
INCLUDE_NOTHING = ("reasoning.encrypted_content",)
TRUNCATION = ("disabled", "auto")  # the session keeps its context in the window either way
METADATA = (16, 64, 512)  # OpenAI's bounds: pairs, key length, value length
# resp_<the session id, base64url without padding>_<32 hex digits of the request's identity>
_RESPONSE_ID = re.compile(r"resp_([A-Za-z0-9_-]{1,172})_([0-9a-f]{32})")
MAX_RESPONSE_ID = 5 + 172 + 1 + 32


@dataclass
class ResponsesRequest:
    session_id: str
    turn: NewTurn
    tools: tuple[dict[str, Any], ...]  # chat-shaped, as ClientTurn takes them
    tool_choice: str | dict[str, Any] | None
    options: ModelOptions
    stream: bool
    follows: str  # previous_response_id, or ""
    echo: dict[str, Any]  # the parameters as the response object repeats them
    message_id: str  # the same for each attempt of the request (options.retry_identity)
    replayed: bool  # a retry: the core answers it from the session instead of saving it twice

    @property
    def response_id(self) -> str:
        """This answer's id, the same for each attempt of the request: a retry of one whose
        answer was made but lost on the way is answered under the id it was saved with."""
        return response_id(
            self.session_id, hashlib.sha256(self.message_id.encode()).hexdigest()[:32]
        )


def response_id(session_id: str, tail: str) -> str:
    """A response's id in this session (`tail`: 32 hex digits)."""
    name = base64.urlsafe_b64encode(session_id.encode()).rstrip(b"=").decode()
    return f"resp_{name}_{tail}"


def session_of(value: Any) -> str:
    """The session a previous_response_id was made in; a 400 for what no response id is."""
    refused = BadRequest(
        "'previous_response_id' is not the id of a response of this agent (resp_...)",
        param="previous_response_id",
    )
    if not isinstance(value, str) or len(value) > MAX_RESPONSE_ID:
        raise refused
    if (match := _RESPONSE_ID.fullmatch(value)) is None:
        raise refused
    name = match.group(1)
    try:
        session = base64.urlsafe_b64decode(name + "=" * (-len(name) % 4)).decode()
    except (binascii.Error, ValueError):
        raise refused from None
    if not valid_session_id(session) or response_id(session, match.group(2)) != value:
        raise refused  # only what response_id makes, byte for byte
    return session


def parse_responses(raw: bytes, headers: Mapping[str, str], max_parts: int) -> ResponsesRequest:
    body = json_object(raw)
    refuse_unsupported(body, HONOURED)
    follows = body.get("previous_response_id")
    session = session_from(body, headers)
    if follows is not None:
        named = session_of(follows)
        explicit = body.get("session_id") or body.get("user") or headers.get(SESSION_HEADER)
        if explicit and named != session:
            raise BadRequest(
                f"'previous_response_id' is a response of another session than {session!r} "
                "(the session_id, user or X-Session-Id given): leave one out, or make them agree",
                param="previous_response_id",
            )
        session = named
    turn = new_turn(body.get("input"), body.get("instructions"), max_parts)
    tools = _tools(body.get("tools"))
    tool_choice = _tool_choice(body.get("tool_choice"), tools)
    text = _text(body.get("text"))
    try:
        response_format = checked_response_format(
            _response_format(text.get("format")), "text.format"
        )
    except BadRequest as exc:  # text.format.json_schema.schema → text.format.schema
        raise _renamed(exc, (".json_schema", "")) from None
    chat = {name: body.get(name) for name in ("temperature", "top_p", "parallel_tool_calls")}
    chat["max_tokens"] = body.get("max_output_tokens")
    try:
        options = model_options(chat, response_format=response_format)
    except BadRequest as exc:
        raise _renamed(exc, ("max_tokens", "max_output_tokens")) from None
    _no_ops(body)
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest("'stream' must be true or false", param="stream")
    new = {key: body.get(key) for key in ("input", "instructions", "previous_response_id")}
    message_id, replayed = retry_identity(headers, session, new)
    return ResponsesRequest(
        session_id=session,
        turn=turn,
        tools=tools,
        tool_choice=tool_choice,
        options=options,
        stream=stream is True,
        follows=follows or "",
        echo=_echo(body, text),
        message_id=message_id,
        replayed=replayed,
    )


def _renamed(exc: BadRequest, *names: tuple[str, str]) -> BadRequest:
    """A chat parameter's BadRequest speaking of the Responses API's names for its parts."""
    message, param = str(exc), exc.param
    for old, new in names:
        message = message.replace(old, new)
        param = param.replace(old, new) if param else param
    return BadRequest(message, exc.status, param)


def _tools(value: Any) -> tuple[dict[str, Any], ...]:
    """Flat function tools ({"type": "function", "name", ...}) in the chat shape."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise BadRequest("'tools' must be a list", param="tools")
    shaped = []
    for number, tool in enumerate(value):
        at = f"tools[{number}]"
        kind = tool.get("type") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or kind != "function":
            named = f"a {kind[:40]!r} tool" if isinstance(kind, str) else "not a tool"
            raise BadRequest(
                f"{at} is {named}: the agent API takes function tools only (its own tools, "
                "web search among them, are the agent's)",
                param=f"{at}.type",
            )
        if unknown := [name for name in tool if name not in FUNCTION_FIELDS]:
            raise BadRequest(
                f"{at}.{unknown[0][:40]} is not read here: a function tool has "
                f"{', '.join(FUNCTION_FIELDS[1:])}",
                param=f"{at}.{unknown[0][:40]}",
            )
        function = {name: tool[name] for name in FUNCTION_FIELDS[1:] if name in tool}
        shaped.append({"type": "function", "function": function})
    try:
        return checked_tools(shaped, "tools")
    except BadRequest as exc:  # tools[0].function.name → tools[0].name
        raise _renamed(exc, (".function", "")) from None


def _tool_choice(value: Any, tools: tuple[dict[str, Any], ...]) -> str | dict[str, Any] | None:
    if isinstance(value, dict):
        if value.get("type") != "function" or set(value) - {"type", "name"}:
            raise BadRequest(
                '\'tool_choice\' is auto, none, required or {"type": "function", "name": '
                "...}: other kinds of tools are not offered here",
                param="tool_choice",
            )
        value = {"type": "function", "function": {"name": value.get("name")}}
    choice: str | dict[str, Any] | None = checked_tool_choice(value, tools, "tool_choice")
    return choice


def _text(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequest("'text' must be an object (format, verbosity)", param="text")
    if unknown := [name for name in value if name not in ("format", "verbosity")]:
        raise BadRequest(f"text.{unknown[0][:40]} is not supported", param=f"text.{unknown[0]}")
    if value.get("verbosity") not in (None, "medium"):
        raise BadRequest(
            "text.verbosity: only medium (the default) is honoured: the agent's own prompt "
            "decides how much it writes",
            param="text.verbosity",
        )
    return value


def _response_format(value: Any) -> Any:
    """text.format in the chat shape (response_format), for options.checked_response_format:
    a json_schema format's fields go under "json_schema"."""
    if isinstance(value, dict) and value.get("type") == "json_schema":
        schema = {key: item for key, item in value.items() if key != "type"}
        return {"type": "json_schema", "json_schema": schema}
    return value


def _no_ops(body: dict[str, Any]) -> None:
    """The parameters taken at the values that change nothing, and those merely checked."""
    reasoning = body.get("reasoning")
    if reasoning is not None and (
        not isinstance(reasoning, dict) or any(v is not None for v in reasoning.values())
    ):
        raise BadRequest(
            "'reasoning' is not supported: the agent's model and its settings decide it "
            "(send null, or leave it out)",
            param="reasoning",
        )
    include = body.get("include")
    if include is not None:
        if not isinstance(include, list):
            raise BadRequest("'include' must be a list", param="include")
        for number, name in enumerate(include):
            if name not in INCLUDE_NOTHING:
                shown = repr(name)[:60]
                raise BadRequest(
                    f"include[{number}] {shown} is not supported (no logprobs, no tool outputs "
                    "of OpenAI's own tools)",
                    param=f"include[{number}]",
                )
    if body.get("truncation") not in (None, *TRUNCATION):
        raise BadRequest("'truncation' must be auto or disabled", param="truncation")
    for name in ("store",):
        if body.get(name) is not None and not isinstance(body[name], bool):
            raise BadRequest(f"'{name}' must be true or false", param=name)
    for name in ("prompt_cache_key", "model"):
        if body.get(name) is not None and not isinstance(body[name], str):
            raise BadRequest(f"'{name}' must be a string", param=name)
    options = body.get("stream_options")
    if options is not None and (
        not isinstance(options, dict)
        or set(options) - {"include_obfuscation"}
        or not isinstance(options.get("include_obfuscation", False), bool)
    ):
        raise BadRequest(
            "'stream_options' takes include_obfuscation (true or false) only",
            param="stream_options",
        )
    _metadata(body.get("metadata"))


def _metadata(value: Any) -> None:
    pairs, key_chars, value_chars = METADATA
    if value is None:
        return
    if not isinstance(value, dict) or len(value) > pairs:
        raise BadRequest(f"'metadata' must be an object of at most {pairs} pairs", param="metadata")
    for key, item in value.items():
        if len(key) > key_chars or not isinstance(item, str) or len(item) > value_chars:
            raise BadRequest(
                f"'metadata' keys are at most {key_chars} characters, its values strings of at "
                f"most {value_chars}",
                param="metadata",
            )


def _echo(body: dict[str, Any], text: dict[str, Any]) -> dict[str, Any]:
    """What a response object repeats of its request (OpenAI's defaults where not given)."""
    given: dict[str, Any] = {
        "instructions": None,
        "metadata": {},
        "tools": [],
        "tool_choice": "auto",
        "temperature": None,
        "top_p": None,
        "max_output_tokens": None,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "truncation": "disabled",
        "reasoning": None,
        "user": None,
    }
    echo = {
        name: default if body.get(name) is None else body[name] for name, default in given.items()
    }
    echo["text"] = {"format": text.get("format") or {"type": "text"}, "verbosity": "medium"}
    echo["store"] = True  # what was done: the session keeps every turn, whatever was asked
    return echo
