"""The OpenAI chat-completions wire format for the agent API: requests in, JSON and SSE out."""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from nanomem.agent import Button
from nanomem.text import untrusted_json

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
_DATA_URL = re.compile(r"data:(image/[a-z]+);base64,(.*)", re.S)
# Provider error categories → (HTTP status, OpenAI error type, code).
ERROR_STATUS: dict[str, tuple[int, str, str]] = {
    "rate_limited": (429, "rate_limit_error", "rate_limit_exceeded"),
    "quota": (429, "insufficient_quota", "insufficient_quota"),
    "timeout": (504, "api_error", "upstream_timeout"),
    "unreachable": (503, "api_error", "upstream_unreachable"),
    "context_too_long": (400, "invalid_request_error", "context_length_exceeded"),
}
UPSTREAM = (502, "api_error", "upstream_error")  # auth, not_found, bad_request, server, empty


class BadRequest(Exception):
    """A request we refuse before anything reaches the model; carries its HTTP status."""

    def __init__(self, message: str, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.param = status, param


@dataclass
class ChatRequest:
    session_id: str
    text: str
    images: list[tuple[str, bytes]] = field(default_factory=list)  # (suffix, bytes)
    stream: bool = False
    include_usage: bool = False


def error_body(
    message: str, kind: str = "invalid_request_error", code: str | None = None, param: Any = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def parse_request(raw: bytes) -> ChatRequest:
    """The new turn of a chat-completions body: only the last message counts (our session holds
    the conversation), and it must be the user's."""
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
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list", param="messages")
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "user":
        raise BadRequest(
            "the last message must be the user's: the agent keeps the conversation itself, "
            "so only the new user message is read",
            param="messages",
        )
    text, images = _content(last.get("content"))
    if not text.strip() and not images:
        raise BadRequest("the last user message is empty", param="messages")
    options = body.get("stream_options")
    return ChatRequest(
        session_id=_session_id(body),
        text=text,
        images=images,
        stream=body.get("stream") is True,
        include_usage=isinstance(options, dict) and options.get("include_usage") is True,
    )


def _session_id(body: dict[str, Any]) -> str:
    for name in ("session_id", "user"):
        value = body.get(name)
        if value is None or value == "":
            continue
        if not isinstance(value, str) or not _SESSION_ID.fullmatch(value):
            raise BadRequest(
                f"'{name}' must be 1-128 letters, digits or _.@+=- and start with a letter or "
                "digit",
                param=name,
            )
        return value
    return "default"


def _content(content: Any) -> tuple[str, list[tuple[str, bytes]]]:
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        raise BadRequest("the message content must be a string or a list of parts")
    texts: list[str] = []
    images: list[tuple[str, bytes]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            images.append(_image(url if isinstance(url, str) else ""))
        else:
            raise BadRequest(f"unsupported content part {kind!r} (text and image_url are read)")
    return "\n".join(texts), images


def _image(url: str) -> tuple[str, bytes]:
    match = _DATA_URL.fullmatch(url.strip())
    if match is None or match.group(1) not in IMAGE_SUFFIX:
        raise BadRequest(
            "images must be base64 data URLs (data:image/png;base64,...) of JPEG, PNG, WebP or GIF"
        )
    try:
        data = base64.b64decode(match.group(2), validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest("an image data URL is not valid base64") from None
    return IMAGE_SUFFIX[match.group(1)], data


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def completion(
    cid: str, text: str, used: dict[str, int], buttons: tuple[Button, ...] = ()
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if buttons:  # nanomem's own field (clients ignore it): what a button would send
        message["buttons"] = [{"label": b.label, "command": b.command} for b in buttons]
    return {
        "id": cid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": MODEL_ID,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": used,
    }


def chunk(cid: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": MODEL_ID,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return event(body)


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
