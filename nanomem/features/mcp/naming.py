"""An MCP server's tools as the model's tools: names providers accept, schemas strict ones take.

Names: `mcp_<server>_<tool>`, only `[A-Za-z0-9_-]`, at most 64 characters. Server names have no
`_` (config.py), so two servers never make the same name; within a server, a tool name that
had to change (other characters, too long) gets a short hash of its real name, so two that
change alike still differ, whatever order the server lists them in.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

MAX_NAME = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
# Keys strict providers reject (OpenAI's strict mode, Gemini's OpenAPI subset) and that no
# model needs: where the schema came from, comments, examples of the whole document.
_DROPPED = ("$schema", "$id", "$comment", "$anchor", "$dynamicAnchor", "examples", "title")
_MAX_DEPTH = 12  # references followed into one another at most this deep
_MAX_NESTING = 64  # objects and lists within one another, at most (Python's stack is finite)


def tool_name(server: str, tool: str) -> str:
    """The model's name for `tool` of `server`."""
    prefix = f"mcp_{server}_"
    safe = _UNSAFE.sub("_", tool)
    if safe == tool and len(prefix) + len(tool) <= MAX_NAME and tool:
        return prefix + tool
    digest = hashlib.sha256(tool.encode("utf-8", "surrogatepass")).hexdigest()[:6]
    room = MAX_NAME - len(prefix) - len(digest) - 1
    return f"{prefix}{safe[:room]}_{digest}"


class SchemaTooLarge(ValueError):
    """A schema that would expand past the bound (its message says which)."""


def clean_schema(schema: Any, max_bytes: int = 64 * 1024) -> dict[str, Any]:
    """The server's input schema as a function's parameters: an object with properties, local
    references resolved, and the keys strict providers refuse dropped. SchemaTooLarge once the
    result passes `max_bytes` of JSON or nests too deep: counted as it is built, so a schema
    whose references multiply stops there instead of expanding in full."""
    if not isinstance(schema, dict):
        schema = {}
    definitions = {
        **_mapping(schema.get("definitions")),
        **_mapping(schema.get("$defs")),
    }
    top = {k: v for k, v in schema.items() if k not in ("$defs", "definitions")}
    cleaned = _Cleaner(definitions, max_bytes).clean(top, 0, 0)
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


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class _Cleaner:
    """Builds a fresh copy (the input is never changed) and counts, as it goes, a lower bound
    of its size as JSON text."""

    def __init__(self, definitions: dict[str, Any], max_bytes: int) -> None:
        self.definitions = definitions
        self.max_bytes = max_bytes
        self.size = 0

    def spend(self, size: int) -> None:
        self.size += size
        if self.size > self.max_bytes:
            raise SchemaTooLarge(f"its schema is over {kilobytes(self.max_bytes)}")

    def clean(self, node: Any, refs: int, nesting: int) -> Any:
        if nesting > _MAX_NESTING:
            raise SchemaTooLarge(f"its schema nests over {_MAX_NESTING} levels deep")
        if isinstance(node, list):
            self.spend(2 + len(node))
            return [self.clean(item, refs, nesting + 1) for item in node]
        if not isinstance(node, dict):
            self.spend(_scalar_size(node))
            return node
        ref = node.get("$ref")
        if isinstance(ref, str):
            target = self.definitions.get(ref.rsplit("/", 1)[-1]) if ref.startswith("#/") else None
            if not isinstance(target, dict) or refs >= _MAX_DEPTH:
                # An outside or endlessly nested reference: any value, described as far as known.
                known = {k: v for k, v in node.items() if k == "description"}
                return self.clean(known, refs, nesting)
            merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
            return self.clean(merged, refs + 1, nesting)
        self.spend(2)
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _DROPPED:
                continue
            self.spend(len(key) + 4)
            # The keys of these maps are names (a property may be called `title`), never keywords.
            if key in ("properties", "patternProperties", "$defs", "definitions") and isinstance(
                value, dict
            ):
                self.spend(2)
                named = {}
                for name, sub in value.items():
                    self.spend(len(name) + 4)
                    named[name] = self.clean(sub, refs, nesting + 2)
                out[key] = named
            else:
                out[key] = self.clean(value, refs, nesting + 1)
        return out


def _scalar_size(value: Any) -> int:
    if isinstance(value, str):
        return len(value) + 2
    if value is None or isinstance(value, bool):
        return 4
    return len(str(value)) if isinstance(value, int | float) else 2


def kilobytes(size: int) -> str:
    return f"{size // 1024} kB" if size >= 1024 else f"{size} bytes"
