"""An MCP server's tools as the model's tools: names providers accept, schemas strict ones take.

Names: `mcp_<server>_<tool>`, only `[A-Za-z0-9_-]`, at most 64 characters. Server names have no
`_` (config.py), so two servers never make the same name; within a server, a tool name that
had to change (other characters, too long) gets a short hash of its real name, so two that
change alike still differ, whatever order the server lists them in.
"""

from __future__ import annotations

import copy
import hashlib
import re
from typing import Any

MAX_NAME = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
# Keys strict providers reject (OpenAI's strict mode, Gemini's OpenAPI subset) and that no
# model needs: where the schema came from, comments, examples of the whole document.
_DROPPED = ("$schema", "$id", "$comment", "$anchor", "$dynamicAnchor", "examples", "title")
_MAX_DEPTH = 12  # references followed into one another at most this deep


def tool_name(server: str, tool: str) -> str:
    """The model's name for `tool` of `server`."""
    prefix = f"mcp_{server}_"
    safe = _UNSAFE.sub("_", tool)
    if safe == tool and len(prefix) + len(tool) <= MAX_NAME and tool:
        return prefix + tool
    digest = hashlib.sha256(tool.encode("utf-8", "surrogatepass")).hexdigest()[:6]
    room = MAX_NAME - len(prefix) - len(digest) - 1
    return f"{prefix}{safe[:room]}_{digest}"


def clean_schema(schema: Any) -> dict[str, Any]:
    """The server's input schema as a function's parameters: an object with properties, local
    references resolved, and the keys strict providers refuse dropped."""
    if not isinstance(schema, dict):
        schema = {}
    definitions = {
        **(schema.get("definitions") or {}),
        **(schema.get("$defs") or {}),
    }
    cleaned = _clean(copy.deepcopy(schema), definitions, 0)
    cleaned.pop("$defs", None)
    cleaned.pop("definitions", None)
    cleaned["type"] = "object"
    properties = cleaned.get("properties")
    cleaned["properties"] = properties if isinstance(properties, dict) else {}
    required = cleaned.get("required")
    if isinstance(required, list):
        kept = [name for name in required if name in cleaned["properties"]]
        if kept:
            cleaned["required"] = kept
        else:
            cleaned.pop("required")
    else:
        cleaned.pop("required", None)
    return cleaned


def _clean(node: Any, definitions: dict[str, Any], depth: int) -> Any:
    if isinstance(node, list):
        return [_clean(item, definitions, depth) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        target = definitions.get(ref.rsplit("/", 1)[-1]) if ref.startswith("#/") else None
        if target is None or depth >= _MAX_DEPTH:
            # An outside or endlessly nested reference: any value, described as far as known.
            return {k: v for k, v in node.items() if k == "description"} or {}
        merged = {**copy.deepcopy(target), **{k: v for k, v in node.items() if k != "$ref"}}
        return _clean(merged, definitions, depth + 1)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        # The keys of these maps are names (a property may be called `title`), never keywords.
        if key in ("properties", "patternProperties", "$defs", "definitions") and isinstance(
            value, dict
        ):
            out[key] = {name: _clean(sub, definitions, depth) for name, sub in value.items()}
        else:
            out[key] = _clean(value, definitions, depth)
    return out
