"""What a request asks of its turn besides the message, checked before anything is saved: the
client's tools and tool_choice, response_format, the model options, the session and a retry's
identity. Shared by /v1/chat/completions and /v1/responses (which converts its own shapes to
chat's first). Every refusal is a BadRequest naming the parameter, as OpenAI's errors do."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from channels.api.wire import BadRequest, valid_session_id
from nanomem.agent import ModelOptions
from nanomem.text import untrusted_json

MAX_TOOLS = 128  # OpenAI's own limit
# One schema's JSON text (a tool's parameters, a response_format): far beyond a real one, and
# every model call of the turn carries it.
MAX_SCHEMA_CHARS = 100_000
MAX_TOOLS_CHARS = 400_000  # all of a request's tools together
# Levels of JSON nesting in one schema: pydantic's and zod's nest through $defs and stay far
# below; the core validates answers against it, and a deep one only makes that slower.
MAX_SCHEMA_DEPTH = 32
MAX_DESCRIPTION_CHARS = 10_000
MAX_STOP = 4
MAX_STOP_CHARS = 200
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_CHOICES = ("auto", "none", "required")
_SEED = 2**63  # OpenAI's seed is a 64-bit integer
SESSION_HEADER = "X-Session-Id"
RETRY_HEADER = "x-stainless-retry-count"  # the openai SDKs' (and litellm's, through them)
IDEMPOTENCY_HEADER = "Idempotency-Key"
MAX_IDEMPOTENCY_KEY = 256

# Parameters a client may send at the value that asks for nothing (OpenAI's defaults).
NO_OP: dict[str, tuple[Any, ...]] = {
    "n": (1,),
    "logprobs": (False,),
    "top_logprobs": (0,),
    "modalities": (["text"],),
    "service_tier": ("auto", "default"),
    "store": (False, True),  # the session keeps every turn either way
    "metadata": ({},),
    "reasoning": ({},),
    "include": ([],),
    "truncation": ("disabled",),
}
# Why a parameter with another value is refused, where the reason is more than "unknown".
REFUSED: dict[str, str] = {
    "n": "the agent gives one answer per turn (n must be 1)",
    "logprobs": "token log probabilities do not pass through the agent",
    "top_logprobs": "token log probabilities do not pass through the agent",
    "logit_bias": "token biases do not pass through the agent",
    "audio": "the agent answers in text",
    "modalities": 'the agent answers in text (modalities must be ["text"])',
    "prediction": "predicted outputs do not pass through the agent",
    "functions": "the legacy 'functions' are not read: send 'tools'",
    "function_call": "the legacy 'function_call' is not read: send 'tool_choice'",
    "web_search_options": "the agent searches the web with its own tools",
    "reasoning_effort": "the agent's model and its reasoning are nanomem's settings",
    "reasoning": "the agent's model and its reasoning are nanomem's settings",
    "service_tier": "the agent's model and its tier are nanomem's settings",
    "metadata": "metadata is not kept",
    "include": "nothing more can be included",
    "truncation": "the agent keeps its session within the model's context itself",
}


def checked_tools(value: Any, param: str = "tools") -> tuple[dict[str, Any], ...]:
    """The client's function tools in chat's shape, each with only the fields OpenAI defines."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise BadRequest(f"'{param}' must be a list of tools", param=param)
    if len(value) > MAX_TOOLS:
        raise BadRequest(f"'{param}' has {len(value)} tools; at most {MAX_TOOLS}", param=param)
    tools: list[dict[str, Any]] = []
    names: set[str] = set()
    size = 0
    for number, tool in enumerate(value):
        at = f"{param}[{number}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else None
            shown = f"a {str(kind)[:40]!r} tool" if isinstance(kind, str) else "not a tool"
            raise BadRequest(f"{at} is {shown}; only function tools are read", param=at)
        _only(tool, {"type", "function"}, at)
        function = tool.get("function")
        if not isinstance(function, dict):
            raise BadRequest(f"{at}.function must be an object", param=f"{at}.function")
        checked = _function(function, f"{at}.function")
        if checked["name"] in names:
            raise BadRequest(f"{at}: the tool name {checked['name']!r} is given twice", param=at)
        names.add(checked["name"])
        size += len(json.dumps(checked))
        if size > MAX_TOOLS_CHARS:
            raise BadRequest(
                f"'{param}' come to more than {MAX_TOOLS_CHARS} characters of JSON", param=param
            )
        tools.append({"type": "function", "function": checked})
    return tuple(tools)


def _function(function: dict[str, Any], at: str) -> dict[str, Any]:
    _only(function, {"name", "description", "parameters", "strict"}, at)
    name = function.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise BadRequest(f"{at}.name must be 1-64 letters, digits, _ or -", param=f"{at}.name")
    checked: dict[str, Any] = {"name": name}
    description = function.get("description")
    if description is not None:
        if not isinstance(description, str) or len(description) > MAX_DESCRIPTION_CHARS:
            raise BadRequest(
                f"{at}.description must be a string of at most {MAX_DESCRIPTION_CHARS} characters",
                param=f"{at}.description",
            )
        checked["description"] = description
    parameters = function.get("parameters")
    if parameters is not None:
        checked["parameters"] = _schema(parameters, f"{at}.parameters")
    strict = function.get("strict")
    if strict is not None:
        if not isinstance(strict, bool):
            raise BadRequest(f"{at}.strict must be true or false", param=f"{at}.strict")
        checked["strict"] = strict
    return checked


def _schema(schema: Any, at: str) -> dict[str, Any]:
    if not isinstance(schema, dict):
        raise BadRequest(f"{at} must be a JSON Schema object", param=at)
    text = json.dumps(schema)
    if len(text) > MAX_SCHEMA_CHARS:
        raise BadRequest(f"{at} is larger than {MAX_SCHEMA_CHARS} characters of JSON", param=at)
    if untrusted_json.depth_exceeds(text, MAX_SCHEMA_DEPTH):
        raise BadRequest(f"{at} nests deeper than {MAX_SCHEMA_DEPTH} levels", param=at)
    return schema


def _only(given: dict[str, Any], known: set[str], at: str) -> None:
    for key in given:
        if key not in known:
            raise BadRequest(f"{at} has an unknown field {key[:60]!r}", param=f"{at}.{key[:60]}")


def checked_tool_choice(
    value: Any, tools: tuple[dict[str, Any], ...], param: str = "tool_choice"
) -> str | dict[str, Any] | None:
    """ "auto", "none", "required", or chat's named function (one of the client's tools)."""
    if value is None:
        return None
    if value in _CHOICES:
        if value == "required" and not tools:
            raise BadRequest(f"'{param}' is 'required' but no tools are given", param=param)
        return str(value)
    if isinstance(value, dict) and value.get("type") == "function":
        function = value.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str):
            raise BadRequest(f"{param}.function.name must be a tool's name", param=param)
        if name not in {tool["function"]["name"] for tool in tools}:
            raise BadRequest(
                f"'{param}' names {name[:64]!r}, which is not among the request's tools",
                param=param,
            )
        return {"type": "function", "function": {"name": name}}
    raise BadRequest(
        f"'{param}' must be 'auto', 'none', 'required' or "
        '{"type": "function", "function": {"name": ...}}',
        param=param,
    )


def checked_response_format(value: Any, param: str = "response_format") -> dict[str, Any] | None:
    """json_object, or json_schema with its name, schema and strict; None for plain text."""
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind != "json_schema":
        raise BadRequest(
            f"{param}.type must be 'text', 'json_object' or 'json_schema'", param=param
        )
    assert isinstance(value, dict)
    spec = value.get("json_schema")
    at = f"{param}.json_schema"
    if not isinstance(spec, dict):
        raise BadRequest(f"{at} must be an object with a name and a schema", param=at)
    _only(spec, {"name", "description", "schema", "strict"}, at)
    name = spec.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise BadRequest(f"{at}.name must be 1-64 letters, digits, _ or -", param=f"{at}.name")
    checked: dict[str, Any] = {"name": name, "schema": _schema(spec.get("schema"), f"{at}.schema")}
    description = spec.get("description")
    if description is not None:
        if not isinstance(description, str) or len(description) > MAX_DESCRIPTION_CHARS:
            raise BadRequest(f"{at}.description must be a short string", param=f"{at}.description")
        checked["description"] = description
    strict = spec.get("strict")
    if strict is not None:
        if not isinstance(strict, bool):
            raise BadRequest(f"{at}.strict must be true or false", param=f"{at}.strict")
        checked["strict"] = strict
    return {"type": "json_schema", "json_schema": checked}


def model_options(
    body: Mapping[str, Any], response_format: dict[str, Any] | None = None
) -> ModelOptions:
    """The sampling and limits a request sets, each in OpenAI's range (null: not set)."""
    limit = _integer(body, "max_completion_tokens", 1, None)
    old = _integer(body, "max_tokens", 1, None)
    if limit is not None and old is not None and limit != old:
        raise BadRequest(
            "'max_tokens' and 'max_completion_tokens' differ; send one", param="max_tokens"
        )
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise BadRequest("'parallel_tool_calls' must be true or false", param="parallel_tool_calls")
    return ModelOptions(
        max_tokens=limit if limit is not None else old,
        temperature=_number(body, "temperature", 0, 2),
        top_p=_number(body, "top_p", 0, 1),
        stop=_stop(body.get("stop")),
        seed=_integer(body, "seed", -_SEED, _SEED - 1),
        presence_penalty=_number(body, "presence_penalty", -2, 2),
        frequency_penalty=_number(body, "frequency_penalty", -2, 2),
        parallel_tool_calls=parallel,
        response_format=response_format,
    )


def _number(body: Mapping[str, Any], name: str, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadRequest(f"Invalid '{name}': expected a number", param=name)
    _within(name, value, low, high, "decimal")
    return float(value)


def _integer(body: Mapping[str, Any], name: str, low: int, high: int | None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"Invalid '{name}': expected an integer", param=name)
    _within(name, value, low, high, "integer")
    return value


def _within(name: str, value: float, low: float, high: float | None, kind: str) -> None:
    """A 400 in OpenAI's words when `value` is outside [low, high] (no upper bound: None)."""
    # Decimals as OpenAI prints them (2, 2.5); integers whole (a seed's 2**63 is not 9.2e+18).
    shown = (lambda number: f"{number:g}") if kind == "decimal" else str
    if value < low:
        side, expected = "below minimum", f">= {shown(low)}"
    elif high is not None and value > high:
        side, expected = "above maximum", f"<= {shown(high)}"
    else:
        return
    raise BadRequest(
        f"Invalid '{name}': {kind} {side} value. Expected a value {expected}, "
        f"but got {shown(value)} instead.",
        param=name,
    )


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if (
        not isinstance(stops, list)
        or len(stops) > MAX_STOP
        or not all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in stops)
    ):
        raise BadRequest(
            f"'stop' must be a string or a list of at most {MAX_STOP} non-empty strings of "
            f"at most {MAX_STOP_CHARS} characters",
            param="stop",
        )
    return tuple(stops)


def refuse_unsupported(body: Mapping[str, Any], honoured: frozenset[str]) -> None:
    """A 400 naming the first parameter that is neither honoured nor at its no-op value: what
    a client sends is never silently dropped."""
    for name, value in body.items():
        if name in honoured or value is None or value in NO_OP.get(name, ()):
            continue
        shown = name[:60]
        reason = REFUSED.get(name)
        if reason is None:
            raise BadRequest(f"Unrecognized request argument supplied: {shown}", param=shown)
        raise BadRequest(f"'{shown}' is not supported here: {reason}", param=shown)


def session_from(body: Mapping[str, Any], headers: Mapping[str, str]) -> str:
    """The session a request speaks in: session_id, else user (each in the body), else the
    X-Session-Id header (for clients that can set only headers), else "default"."""
    for name in ("session_id", "user"):
        value = body.get(name)
        if value is None or value == "":
            continue
        return _session(value, name)
    header = headers.get(SESSION_HEADER)
    if header:
        return _session(header.strip(), SESSION_HEADER)
    return "default"


def _session(value: Any, name: str) -> str:
    if not isinstance(value, str) or not valid_session_id(value):
        raise BadRequest(
            f"'{name}' must be 1-128 letters, digits or _.@+=- and start with a letter or digit",
            param=name,
        )
    return value


def retry_identity(headers: Mapping[str, str], session_id: str, new: Any) -> tuple[str, bool]:
    """The id a request's message is saved under, and whether it may be a retry of one saved
    before. The same for every attempt of one request: the session and the new messages
    themselves, with its Idempotency-Key when it has one (a key sent again with other messages
    is another request: a client that sends one key with everything is not answered its first
    reply for ever). A retry is what the SDKs mark as one (their retry count header), or any
    request with a key (whose first attempt may have reached us unanswered)."""
    key = headers.get(IDEMPOTENCY_HEADER, "")
    if len(key) > MAX_IDEMPOTENCY_KEY:
        raise BadRequest(
            f"'{IDEMPOTENCY_HEADER}' is longer than {MAX_IDEMPOTENCY_KEY} characters",
            param=IDEMPOTENCY_HEADER,
        )
    basis = f"{key}\0{session_id}\0" + json.dumps(
        new, sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )
    digest = hashlib.sha256(basis.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"api-{digest}", bool(key) or _retry_count(headers) > 0


def _retry_count(headers: Mapping[str, str]) -> int:
    value = headers.get(RETRY_HEADER, "").strip()
    return int(value) if value.isdigit() and len(value) < 6 else 0
