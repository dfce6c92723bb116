"""The OpenAI chat-completions wire format for the agent API: requests in, JSON and SSE out."""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from nanomem.agent import (
    CLIENT_REQUEST,
    SCHEMA_UNMET,
    STOPPING,
    Button,
    ModelOptions,
    Text,
    ToolResult,
)
from nanomem.agent import image_suffix as told_suffix
from nanomem.text import untrusted_json
from nanomem.text.plural import plural

MODEL_ID = "nanomem"
# Personal sessions only: a leading "-" would make `api:-1` look like a group (a shared room),
# and the id becomes part of a file name.
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+=-]{0,127}")
IMAGE_SUFFIX = {
    "image/jpeg": ".jpg",
    "image/png": ".png",
    "image/webp": ".webp",
    "image/gif": ".gif",
}
# data:<type>[;<parameter>...];base64,<data>
_DATA_URL = re.compile(r"data:([\w.+-]+/[\w.+-]+)((?:;[^;,]*)*);base64,(.*)", re.S | re.I)
AUDIO_FORMATS = ("wav", "mp3")  # what OpenAI's input_audio part takes
PARTS_READ = "text, image_url and input_audio"
# What a file part counts for against agent.max_message_chars: about the line naming its saved
# copy in the message the model gets (media/api/<date>-api-<id>.png and its framing).
FILE_PART_CHARS = 64
KINDS = "JPEG, PNG, WebP or GIF"
# Provider error categories → (HTTP status, OpenAI error type, code).
ERROR_STATUS: dict[str, tuple[int, str, str]] = {
    "rate_limited": (429, "rate_limit_error", "rate_limit_exceeded"),
    "quota": (429, "insufficient_quota", "insufficient_quota"),
    "timeout": (504, "api_error", "upstream_timeout"),
    "unreachable": (503, "api_error", "upstream_unreachable"),
    "context_too_long": (400, "invalid_request_error", "context_length_exceeded"),
}
UPSTREAM = (502, "api_error", "upstream_error")  # auth, not_found, bad_request, server, empty
# A turn the client's request made impossible (agent/client_turn.py), with the core's reason,
# or one a stopping gateway ended.
CLIENT_ERRORS: dict[str, tuple[int, str, str | None]] = {
    CLIENT_REQUEST: (400, "invalid_request_error", None),
    SCHEMA_UNMET: (422, "invalid_request_error", "response_format_unmet"),
    STOPPING: (503, "api_error", "gateway_stopping"),
}
ARGUMENT_PIECE = 512  # characters of a tool call's arguments in one streamed chunk


class Call(Protocol):
    """A tool call of the client's that a turn waits for (Paused.calls), as the wire shows it."""

    @property
    def id(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def arguments(self) -> str: ...


class BadRequest(Exception):
    """A request we refuse before anything reaches the model; carries its HTTP status, and
    any header the refusal needs."""

    def __init__(
        self,
        message: str,
        status: int = 400,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.param, self.headers = status, param, dict(headers or {})


@dataclass(frozen=True)
class Upload:
    """A file part of the new user message: its bytes, given inline, or an image URL the
    channel fetches (`url`; `suffix` and `data` are known once it is fetched)."""

    where: str  # the part, as an error names it: messages[2].content[1]
    suffix: str = ""  # ".png", ".wav"
    data: bytes = b""
    url: str = ""


@dataclass
class ChatRequest:
    session_id: str
    text: str  # the person's new message(s), text parts joined
    uploads: list[Upload] = field(default_factory=list)  # the files, in the parts' order
    stream: bool = False
    include_usage: bool = False
    instructions: tuple[str, ...] = ()  # the client's: its system and developer messages
    results: tuple[ToolResult, ...] = ()  # its tools' results, continuing a paused turn
    superseded: int = 0  # results before the person's new message: not read (NewTurn)
    tools: tuple[dict[str, Any], ...] = ()  # the client's own, in chat's shape
    tool_choice: str | dict[str, Any] | None = None
    options: ModelOptions = field(default_factory=ModelOptions)
    message_id: str = ""  # the same at every attempt of a request (options.retry_identity)
    replayed: bool = False  # a retry, or a request with an Idempotency-Key

    @property
    def size(self) -> int:
        """Its length as agent.max_message_chars counts it: the text, each file's line and
        the tool results."""
        results = sum(len(result.content) for result in self.results)
        return len(self.text) + FILE_PART_CHARS * len(self.uploads) + results

    @property
    def said(self) -> str:
        """What the request adds to the conversation, as its prompt tokens are counted."""
        return "\n\n".join([self.text, *(result.content for result in self.results)])


def valid_session_id(value: str) -> bool:
    return _SESSION_ID.fullmatch(value) is not None


def error_body(
    message: str, kind: str = "invalid_request_error", code: str | None = None, param: Any = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


@dataclass(frozen=True)
class Names:
    """How a route's refusals name the parts of a request."""

    turn: str  # the parameter that brings the new turn: messages, input
    results: str  # the client's tools' results in it
    instructions: str  # the client's instructions
    instructions_param: str  # the parameter that brings them


def fits(parsed: ChatRequest, limit: int, names: Names) -> None:
    """The new turn within agent.max_message_chars (`limit`): the results of the client's
    calls, or its text and a line for each file; and so the client's instructions."""
    if parsed.results and parsed.size > limit:
        raise BadRequest(
            f"the {names.results} are too long ({parsed.size} characters; limit {limit}, "
            "agent.max_message_chars)",
            param=names.turn,
        )
    if parsed.size > limit:
        files = f" with its {plural(len(parsed.uploads), 'file')}" if parsed.uploads else ""
        raise BadRequest(
            f"the message is too long ({parsed.size} characters{files}, {FILE_PART_CHARS} a "
            f"file; limit {limit}, agent.max_message_chars)",
            param=names.turn,
        )
    if (told := sum(map(len, parsed.instructions))) > limit:
        raise BadRequest(
            f"the {names.instructions} are too long ({told} characters; limit {limit}, "
            "agent.max_message_chars)",
            param=names.instructions_param,
        )


def failure(reply: Text) -> tuple[int, str, str | None] | None:
    """(HTTP status, OpenAI error type, code) of a turn that failed; None for an answer."""
    if reply.style != "error" or not reply.category:
        return None
    return CLIENT_ERRORS.get(reply.category) or ERROR_STATUS.get(reply.category, UPSTREAM)


def json_object(raw: bytes) -> dict[str, Any]:
    """A request body as the JSON object it must be (bounded in depth), or a BadRequest."""
    try:
        body = untrusted_json.loads(raw)
    except untrusted_json.TooDeep:
        raise BadRequest(
            f"the request body nests deeper than {untrusted_json.MAX_DEPTH} levels"
        ) from None
    except ValueError:  # UnicodeDecodeError among them
        raise BadRequest("the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body


# Reads one content part (its type, the part, where it stands): its text, or its file.
ReadPart = Callable[[str, dict[str, Any], str], str | Upload]


def content_parts(content: Any, where: str, read: ReadPart) -> tuple[str, list[Upload]]:
    """The text (text parts joined by a blank line) and the files of a message's content,
    each part read by `read`, either API's."""
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        raise BadRequest(f"{where} must be a string or a list of parts", param=where)
    texts: list[str] = []
    uploads: list[Upload] = []
    for number, part in enumerate(content):
        at = f"{where}[{number}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(part, dict) or not isinstance(kind, str):
            raise BadRequest(f"{at} is not a content part (an object with a type)", param=at)
        match read(kind, part, at):
            case str() as text:
                texts.append(text)
            case Upload() as upload:
                uploads.append(upload)
    return "\n\n".join(texts), uploads


def message_content(content: Any, where: str) -> tuple[str, list[Upload]]:
    """A chat message's content: its text and its files."""
    return content_parts(content, where, _chat_part)


def _chat_part(kind: str, part: dict[str, Any], at: str) -> str | Upload:
    if kind == "text":
        if not isinstance(text := part.get("text"), str):
            raise BadRequest(f"{at}: a text part needs 'text', a string", param=at)
        return text
    if kind == "image_url":
        return _image(part.get("image_url"), at)
    if kind == "input_audio":
        return _audio(part.get("input_audio"), at)
    raise BadRequest(
        f"{at} is a {kind[:40]!r} part; the agent API reads {PARTS_READ} parts", param=at
    )


def _image(image: Any, at: str) -> Upload:
    url = image.get("url") if isinstance(image, dict) else None
    if not isinstance(url, str) or not url.strip():
        raise BadRequest(f"{at}: an image_url part needs image_url.url, a string", param=at)
    url = url.strip()
    if url[:7].lower() == "http://" or url[:8].lower() == "https://":
        return Upload(at, url=url)
    match = _DATA_URL.fullmatch(url)
    if match is None:
        raise BadRequest(
            f"{at}: an image URL is a base64 data URL (data:image/png;base64,...) or an "
            "http(s) URL",
            param=at,
        )
    declared = match.group(1).lower()
    if declared not in IMAGE_SUFFIX:
        raise BadRequest(f"{at}: {declared} is not an image type read here ({KINDS})", param=at)
    data = _base64(match.group(3), at)
    return Upload(at, suffix=image_suffix(data, at), data=data)


def _audio(audio: Any, at: str) -> Upload:
    given = audio if isinstance(audio, dict) else {}
    encoded, form = given.get("data"), given.get("format")
    if not isinstance(encoded, str) or not isinstance(form, str):
        raise BadRequest(
            f"{at}: an input_audio part needs input_audio.data (base64) and .format", param=at
        )
    if form.lower() not in AUDIO_FORMATS:
        raise BadRequest(f"{at}: audio format {form[:20]!r} is not wav or mp3", param=at)
    data = _base64(encoded, at)
    if not data:
        raise BadRequest(f"{at}: the audio is empty", param=at)
    # Recorded for this chat: the person's own voice (features/voice/audio.py VOICE_MARK).
    return Upload(at, suffix=f".voice.{form.lower()}", data=data)


def _base64(text: str, at: str) -> bytes:
    try:
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(f"{at}: the data is not valid base64", param=at) from None


def image_suffix(data: bytes, at: str) -> str:
    """The suffix of an image we take, by its bytes (what a server or a data URL says it is
    may be wrong: an HTML page served as image/png)."""
    if (suffix := told_suffix(data)) is None:
        raise BadRequest(f"{at}: the image is not {KINDS}", param=at)
    return suffix


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def completion(
    cid: str,
    text: str,
    used: dict[str, int],
    buttons: tuple[Button, ...] = (),
    calls: tuple[Call, ...] = (),
    finish: str = "stop",
) -> dict[str, Any]:
    """A chat.completion; with `calls` (the client's tools the turn waits for) its message
    carries them, and no content unless the model wrote some beside them."""
    message: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
    if calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in calls
        ]
    if buttons:  # nanomem's own field (clients ignore it): what a button would send
        message["buttons"] = [{"label": b.label, "command": b.command} for b in buttons]
    return {
        "id": cid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": MODEL_ID,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": used,
    }


def chunk(
    cid: str, delta: dict[str, Any], finish: str | None = None, *, usage_later: bool = False
) -> bytes:
    """A chat.completion.chunk; `usage_later`: a usage chunk ends the stream (include_usage),
    and every chunk before it says `"usage": null`, as OpenAI's do."""
    body: dict[str, Any] = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": MODEL_ID,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage_later:
        body["usage"] = None
    return event(body)


def call_deltas(calls: tuple[Call, ...]) -> list[dict[str, Any]]:
    """The deltas of tool calls streamed as OpenAI streams them: per call, one with its index,
    id, type and name (arguments ""), then its arguments in pieces; a client joins them."""
    deltas: list[dict[str, Any]] = []
    for index, call in enumerate(calls):
        function = {"name": call.name, "arguments": ""}
        deltas.append({"index": index, "id": call.id, "type": "function", "function": function})
        for start in range(0, len(call.arguments), ARGUMENT_PIECE):
            piece = call.arguments[start : start + ARGUMENT_PIECE]
            deltas.append({"index": index, "function": {"arguments": piece}})
    return [{"tool_calls": [delta]} for delta in deltas]


def usage_chunk(cid: str, used: dict[str, int]) -> bytes:
    body = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": MODEL_ID,
        "choices": [],
        "usage": used,
    }
    return event(body)


def event(body: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n".encode()


DONE = b"data: [DONE]\n\n"
