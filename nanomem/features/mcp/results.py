"""What an MCP tool call returns, as a tool result: its text, and its images.

An image part goes to the registry as an image (saved in the chat's media folder, shown to a
model that takes images); an audio part becomes a short note the model can mention;
structured content comes as JSON; resources as their text.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from nanomem.tools import Image


def result_images(result: Any) -> tuple[Image, ...]:
    """The image parts of a `CallToolResult` whose data decodes (the others are noted)."""
    images = []
    for block in result.content or ():
        if getattr(block, "type", "") == "image" and (data := _decoded(block.data)) is not None:
            images.append(Image(str(block.mimeType), data))
    return tuple(images)


def result_text(result: Any) -> str:
    """The parts of a `CallToolResult`, one after another; an image is left to the registry
    (result_images), which says in the text where it is saved."""
    parts = [_part(block) for block in result.content or ()]
    structured = result.structuredContent
    # FastMCP and others send a structured result as text too: shown once.
    if structured is not None and not _repeats(structured, parts):
        parts.append(json.dumps(structured, ensure_ascii=False, indent=1))
    text = "\n".join(part for part in parts if part)
    if text or any(getattr(block, "type", "") == "image" for block in result.content or ()):
        return text
    return "(no output)"


def _part(block: Any) -> str:
    kind = getattr(block, "type", "")
    if kind == "text":
        return str(block.text)
    if kind == "image" and _decoded(block.data) is not None:
        return ""  # the registry names it, once saved
    if kind in ("image", "audio"):
        return f"[{kind}: {block.mimeType}, {_size(block.data)} bytes]"
    if kind == "resource_link":
        described = f" — {block.description}" if block.description else ""
        return f"[resource: {block.name} {block.uri}{described}]"
    if kind == "resource":
        contents = block.resource
        text = getattr(contents, "text", None)
        if text is not None:
            return f"[resource {contents.uri}]\n{text}"
        mime = contents.mimeType or "application/octet-stream"
        return f"[resource {contents.uri}: {mime}, {_size(contents.blob)} bytes]"
    return f"[{kind or 'unknown'} content]"


def _decoded(data: str) -> bytes | None:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def _size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)


def _repeats(structured: Any, parts: list[str]) -> bool:
    """Whether a text part already says it: as JSON, or (FastMCP wraps a plain value as
    `{"result": value}`) as the value's own text."""
    wrapped = structured.get("result", structured) if len(structured) == 1 else structured
    for part in parts:
        if part == str(wrapped):
            return True
        try:
            if json.loads(part) in (structured, wrapped):
                return True
        except ValueError:
            continue
    return False
