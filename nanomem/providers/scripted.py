"""A scripted model for tests and demos: replays Replies (or raises errors) in order."""

from __future__ import annotations

import asyncio
import copy
import json
import re
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from nanomem.providers.provider import (
    ModelOptions,
    ProviderError,
    Reply,
    TextSink,
    ToolCall,
    ToolChoice,
)

Step = Reply | ProviderError | Callable[[list[dict[str, Any]]], Reply | Awaitable[Reply]]


def text(content: str) -> Reply:
    return Reply(content=content, finish_reason="stop")


def call(name: str, arguments: dict[str, Any] | str, call_id: str | None = None) -> Reply:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Reply(
        content=None,
        tool_calls=(ToolCall(call_id or f"call_{name}", name, raw),),
        finish_reason="tool_calls",
    )


class ScriptedProvider:
    """Implements the Provider protocol; when the script runs out it echoes the last user text."""

    def __init__(self, steps: Iterable[Step] = (), *, latency: float = 0.0) -> None:
        self.steps: deque[Step] = deque(steps)
        self.latency = latency
        self.calls: list[list[dict[str, Any]]] = []
        self.tools_seen: list[list[dict[str, Any]] | None] = []
        self.tool_choices: list[ToolChoice | None] = []
        self.options_seen: list[ModelOptions | None] = []

    def add(self, *steps: Step) -> None:
        self.steps.extend(steps)

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        max_tokens: int | None = None,
        tool_choice: ToolChoice | None = None,
        on_text: TextSink | None = None,
        options: ModelOptions | None = None,
    ) -> Reply:
        self.options_seen.append(options)
        reply = await self._next(messages, tools, tool_choice)
        if on_text is not None and reply.content:
            for piece in re.findall(r"\S*\s*", reply.content):  # word by word, as models do
                if piece:
                    await on_text(piece)
        return reply

    async def _next(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        tool_choice: ToolChoice | None,
    ) -> Reply:
        self.calls.append(copy.deepcopy(messages))
        self.tools_seen.append(tools)
        self.tool_choices.append(tool_choice)
        if self.latency:
            await asyncio.sleep(self.latency)
        if not self.steps:
            return text(f"echo: {last_user_text(messages)}")
        step = self.steps.popleft()
        if isinstance(step, ProviderError):
            raise step
        if isinstance(step, Reply):
            return step
        result = step(messages)
        return await result if isinstance(result, Awaitable) else result


def last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            return str(content or "")
    return ""
