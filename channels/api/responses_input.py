"""The Responses API's `input`: the new turn of a request, read from its items.

The session holds the conversation: what a client sends back of it (the assistant's messages,
its function calls, reasoning) is its copy and is not read. The new turn is what follows the
last of those: the person's message(s), or the results of the client's function calls. System
and developer messages, wherever they are, are the client's instructions for this turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from channels.api.wire import BadRequest, Upload, _image, content_parts
from nanomem.agent import ToolResult

# Items a request may hold: a long conversation sent back whole (the Agents SDK does without
# previous_response_id) stays far below this; a flood of them is refused before any is read.
MAX_ITEMS = 2000
MAX_CALL_ID = 256  # a model's call ids are tens of characters
# Items the server wrote (or another server's model), sent back as the client's copy.
ANSWERED = ("function_call", "reasoning")
ROLES = ("user", "system", "developer", "assistant")
PARTS_READ = "input_text and input_image"


@dataclass
class NewTurn:
    text: str = ""
    uploads: list[Upload] = field(default_factory=list)  # the files, in the parts' order
    instructions: tuple[str, ...] = ()
    results: tuple[ToolResult, ...] = ()


def new_turn(value: Any, instructions: Any, max_parts: int) -> NewTurn:
    """The turn `input` asks for (and `instructions` first among the client's instructions)."""
    told: list[str] = []
    if instructions is not None:
        if not isinstance(instructions, str):
            raise BadRequest("'instructions' must be a string", param="instructions")
        if instructions.strip():
            told.append(instructions)
    if isinstance(value, str):
        if not value.strip():
            raise BadRequest("'input' is empty", param="input")
        return NewTurn(value, instructions=tuple(told))
    if not isinstance(value, list) or not value:
        raise BadRequest("'input' must be a string or a non-empty list of items", param="input")
    if len(value) > MAX_ITEMS:
        raise BadRequest(
            f"'input' has {len(value)} items; limit {MAX_ITEMS} (previous_response_id carries "
            "the conversation: send only the new items)",
            param="input",
        )
    kinds = [_kind(item, f"input[{number}]") for number, item in enumerate(value)]
    start = 1 + max(
        (n for n, (kind, role) in enumerate(kinds) if kind in ANSWERED or role == "assistant"),
        default=-1,
    )
    texts: list[str] = []
    uploads: list[Upload] = []
    results: list[ToolResult] = []
    parts = 0
    for number, (item, (kind, role)) in enumerate(zip(value, kinds, strict=True)):
        at = f"input[{number}]"
        if role in ("system", "developer"):
            told.append(_instruction(item.get("content"), f"{at}.content"))
        elif number < start:
            continue  # the client's copy of the conversation: the session has it
        elif role == "user":
            content = item.get("content")
            parts += len(content) if isinstance(content, list) else 1
            if parts > max_parts:
                raise BadRequest(
                    f"the new user message(s) have more than {max_parts} content parts "
                    "(api.max_parts)",
                    param=f"{at}.content",
                )
            text, files = _content(content, f"{at}.content")
            texts.append(text)
            uploads.extend(files)
        elif kind == "function_call_output":
            results.append(_result(item, at))
        else:
            raise BadRequest(
                f"{at} is a {(role or kind)[:40]!r} item; a new turn is read from user messages "
                "and function_call_output items",
                param=at,
            )
    text = "\n\n".join(t for t in texts if t)
    if results and (text.strip() or uploads):
        raise BadRequest(
            "the input brings function_call_output items and a user message together: send "
            "the results, then the message in a request of its own",
            param="input",
        )
    if not results and not text.strip() and not uploads:
        raise BadRequest(
            "the input has no user message and no function_call_output after the last "
            "assistant item: there is nothing new to answer",
            param="input",
        )
    return NewTurn(text, uploads, tuple(told), tuple(results))


def _kind(item: Any, at: str) -> tuple[str, str]:
    """(type, role) of an item; role "" for what is not a message."""
    if not isinstance(item, dict):
        raise BadRequest(f"{at} is not an input item (an object)", param=at)
    kind, role = item.get("type"), item.get("role")
    if kind is None and role is not None:
        kind = "message"  # the short form: {"role": "user", "content": "hi"}
    if not isinstance(kind, str):
        raise BadRequest(f"{at} has no type", param=at)
    if kind != "message":
        return kind, ""
    if role not in ROLES:
        raise BadRequest(f"{at}.role must be one of {', '.join(ROLES)}", param=f"{at}.role")
    return kind, str(role)


def _instruction(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest(f"{where} must be a string or a list of parts", param=where)
    texts = []
    for number, part in enumerate(content):
        at = f"{where}[{number}]"
        if not isinstance(part, dict) or part.get("type") != "input_text":
            raise BadRequest(f"{at}: a system message reads input_text parts only", param=at)
        texts.append(_text(part, at))
    return "\n\n".join(texts)


def _content(content: Any, where: str) -> tuple[str, list[Upload]]:
    """The text and the files of a user message."""
    return content_parts(content, where, _input_part)


def _input_part(kind: str, part: dict[str, Any], at: str) -> str | Upload:
    if kind == "input_text":
        return _text(part, at)
    if kind == "input_image":
        return _input_image(part, at)
    if kind == "input_file":
        raise BadRequest(
            f"{at} is an input_file part: files are not read here; send an image as "
            "input_image, or the text as input_text",
            param=at,
        )
    raise BadRequest(
        f"{at} is a {kind[:40]!r} part; a user message reads {PARTS_READ} parts", param=at
    )


def _text(part: dict[str, Any], at: str) -> str:
    if not isinstance(text := part.get("text"), str):
        raise BadRequest(f"{at}: an input_text part needs 'text', a string", param=at)
    return text


def _input_image(part: dict[str, Any], at: str) -> Upload:
    if part.get("file_id") is not None:
        raise BadRequest(
            f"{at}: images by file_id are not read here (there is no files upload); send "
            "image_url, a data URL or an http(s) URL",
            param=at,
        )
    url = part.get("image_url")
    if not isinstance(url, str) or not url.strip():
        raise BadRequest(f"{at}: an input_image part needs image_url, a string", param=at)
    return _image({"url": url}, at)  # read as a chat image_url part's URL is


def _result(item: dict[str, Any], at: str) -> ToolResult:
    call_id, output = item.get("call_id"), item.get("output")
    if not isinstance(call_id, str) or not 0 < len(call_id) <= MAX_CALL_ID:
        raise BadRequest(
            f"{at}.call_id must be the call_id of a function_call (a string of 1-{MAX_CALL_ID})",
            param=f"{at}.call_id",
        )
    if isinstance(output, list):
        texts = []
        for number, part in enumerate(output):
            where = f"{at}.output[{number}]"
            if not isinstance(part, dict) or part.get("type") != "input_text":
                raise BadRequest(
                    f"{where}: a function call's output is read as text (input_text parts)",
                    param=where,
                )
            texts.append(_text(part, where))
        output = "\n\n".join(texts)
    if not isinstance(output, str):
        raise BadRequest(f"{at}.output must be a string or input_text parts", param=f"{at}.output")
    return ToolResult(call_id, output)
