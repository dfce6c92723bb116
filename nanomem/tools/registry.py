"""Tools are typed functions: name from the function, description from its docstring,
JSON schema from its signature. The registry is the one place a tool failure becomes an
observation for the model."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

from loguru import logger
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from nanomem.log import redact
from nanomem.text import untrusted_json
from nanomem.text.utf8 import clean_value
from nanomem.tools.context import ToolContext
from nanomem.tools.images import ToolOutput, save_images

F = TypeVar("F", bound=Callable[..., Any])


class ToolError(Exception):
    """A failure the model should read as is (bad path, text not found, ...)."""


def read_only_tool(fn: F) -> F:
    """Mark a tool function as changing nothing, so calls to it may run side by side."""
    setattr(fn, "read_only_tool", True)  # noqa: B010 (a function attribute, read by Tool)
    return fn


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    fn: Callable[..., Any]
    arguments: type[BaseModel]
    read_only: bool = False  # True only when declared: an unknown tool may write
    context_arg: str | None = None  # the parameter that receives the call's ToolContext
    # A JSON schema given as is (an MCP server's): `fn(arguments: dict, context)` receives
    # the arguments as one dict, checked only to be an object; whoever runs it checks the rest.
    parameters: dict[str, Any] | None = None
    # Whom it is offered to (and may run for); None: every chat.
    audience: Callable[[ToolContext], bool] | None = None

    @classmethod
    def from_function(cls, fn: Callable[..., Any], name: str | None = None) -> Tool:
        hints = get_type_hints(fn, include_extras=True)
        fields: dict[str, Any] = {}
        context_arg = None
        for param in inspect.signature(fn).parameters.values():
            if hints.get(param.name) is ToolContext:  # ours to fill in, never the model's
                context_arg = param.name
                continue
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[param.name] = (hints.get(param.name, str), default)
        tool_name = name or fn.__name__
        model = create_model(
            f"{tool_name}_arguments",
            __config__=ConfigDict(extra="forbid"),
            **fields,
        )
        doc = inspect.getdoc(fn) or tool_name
        read_only = getattr(fn, "read_only_tool", False)
        return cls(tool_name, doc.strip(), fn, model, read_only, context_arg)

    @classmethod
    def from_schema(
        cls,
        name: str,
        description: str,
        parameters: dict[str, Any],
        fn: Callable[[dict[str, Any], ToolContext], Awaitable[Any]],
        *,
        read_only: bool = False,
        audience: Callable[[ToolContext], bool] | None = None,
    ) -> Tool:
        """A tool whose schema is given, not derived from a signature."""
        model = create_model(f"{name}_arguments", __config__=ConfigDict(extra="allow"))
        return cls(name, description, fn, model, read_only, None, parameters, audience)

    def offered_to(self, context: ToolContext) -> bool:
        return self.audience is None or self.audience(context)

    def schema(self) -> dict[str, Any]:
        if self.parameters is not None:
            parameters = self.parameters
        else:
            parameters = self.arguments.model_json_schema()
            parameters.pop("title", None)
            for prop in parameters.get("properties", {}).values():
                prop.pop("title", None)
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": parameters,
            },
        }


class ToolRegistry:
    def __init__(
        self,
        tools: Iterable[Tool] = (),
        *,
        max_output_chars: int = 16000,
        workspace: Path | None = None,
    ) -> None:
        self._tools: dict[str, Tool] = {}
        self.max_output_chars = max_output_chars
        self.workspace = workspace  # where images tools return are saved; None: only noted
        for tool in tools:
            self.add(tool)
        self._schemas: list[dict[str, Any]] | None = None
        # The lists offered to each audience, by which tools it is offered: the same list
        # object every turn lets the model client reuse its encoding of them.
        self._by_audience: dict[tuple[bool, ...], list[dict[str, Any]]] = {}
        self._schema_text = "[]"

    def add(self, tool: Tool) -> None:
        self._tools[tool.name] = tool
        self._schemas = None

    def remove(self, name: str) -> None:
        """Take a tool away (an MCP server's, when its list changes)."""
        if self._tools.pop(name, None) is not None:
            self._schemas = None

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def is_read_only(self, name: str) -> bool:
        tool = self._tools.get(name)
        return tool is not None and tool.read_only

    def schemas(self, context: ToolContext | None = None) -> list[dict[str, Any]]:
        """Every tool's schema; with `context`, only those of the tools offered to it."""
        if self._schemas is None:
            self._schemas = [tool.schema() for tool in self._tools.values()]
            self._schema_text = json.dumps(self._schemas)
            self._by_audience = {}
        if context is None or all(tool.audience is None for tool in self._tools.values()):
            return self._schemas
        mask = tuple(tool.offered_to(context) for tool in self._tools.values())
        offered = self._by_audience.get(mask)
        if offered is None:
            offered = [s for s, shown in zip(self._schemas, mask, strict=True) if shown]
            self._by_audience[mask] = offered
        return offered

    @property
    def schema_text(self) -> str:
        """The schemas as JSON, built once: token counting reads it every turn."""
        self.schemas()
        return self._schema_text

    async def call(self, name: str, raw_arguments: str, context: ToolContext) -> str:
        """Run one tool call for `context` (whom the turn works for); every failure comes back
        as text the model can act on. Its images, if any, are saved and named in the text."""
        return (await self.run(name, raw_arguments, context)).text

    async def run(self, name: str, raw_arguments: str, context: ToolContext) -> ToolOutput:
        """`call`, with the images the tool returned (saved in the chat's media folder)."""
        tool = self._tools.get(name)
        if tool is None or not tool.offered_to(context):
            offered = ", ".join(t.name for t in self._tools.values() if t.offered_to(context))
            return ToolOutput(f"Error: unknown tool {name!r}. Available tools: {offered}.")
        try:
            # Clean: "\ud83d" escapes in the JSON text would reach the tools as lone surrogates.
            parsed = clean_value(untrusted_json.loads(raw_arguments or "{}"))
            if not isinstance(parsed, dict):
                raise ValueError("arguments must be a JSON object")
            arguments = tool.arguments.model_validate(parsed)
        except (ValueError, ValidationError) as exc:
            return ToolOutput(f"Error: invalid arguments for {name}: {_short(exc)}")
        if tool.parameters is not None:
            kwargs: dict[str, Any] = {"arguments": parsed, "context": context}
        else:
            kwargs = {field: getattr(arguments, field) for field in type(arguments).model_fields}
        if tool.context_arg is not None:
            kwargs[tool.context_arg] = context
        try:
            if inspect.iscoroutinefunction(tool.fn):
                result = await tool.fn(**kwargs)
            else:
                result = await asyncio.to_thread(tool.fn, **kwargs)
        except ToolError as exc:
            return ToolOutput(f"Error: {exc}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.opt(exception=exc).warning("tool {} failed", name)
            return ToolOutput(f"Error: {name} failed: {type(exc).__name__}: {exc}")
        if not isinstance(result, ToolOutput):
            result = ToolOutput(str(result))
        # A secret a tool came across (a file, a command's output) never reaches the model.
        text = truncated(redact(result.text), self.max_output_chars)
        if not result.images:
            return ToolOutput(text)
        if self.workspace is None:  # nowhere to keep them (Dream's own tools): counted only
            note = f"[{len(result.images)} image(s) not kept: no workspace to save them in]"
            return ToolOutput("\n".join(filter(None, [text, note])))
        notes, saved = await asyncio.to_thread(
            save_images, self.workspace, context.session, result.images, context.shared_room
        )
        return ToolOutput("\n".join(filter(None, [text, *notes])), saved)


def truncated(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying how many more there were."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[output truncated: {len(text) - limit} more characters not shown]"


def _short(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
            for err in exc.errors()
        )
    return str(exc)
