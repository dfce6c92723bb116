"""The ReAct loop: the one place a model call and tool calls alternate. No bus, no session."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from nanomem.providers import ModelOptions, Provider, ToolCall, ToolChoice, Usage
from nanomem.tools import Image, ToolContext, ToolOutput, ToolRegistry

CANCELLED_RESULT = "Cancelled: the turn was stopped before this tool finished."


@dataclass
class ReactResult:
    text: str | None  # None: the iteration limit ended the loop
    messages: list[dict[str, Any]] = field(default_factory=list)
    usage: list[Usage] = field(default_factory=list)
    streamed: str = ""  # the current step's text shown so far (kept if the turn is cut short)
    # The client's tools the last step called: the turn waits for their results (ours ran).
    pending: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None  # the last model call's ("length": cut at max_tokens)


# Receives each piece of streamed text with the number of the model call it belongs to.
StepText = Callable[[int, str], Awaitable[None]]
# The images a step's tools returned, as a message for the next model call (None: not shown).
ShowImages = Callable[[tuple[Image, ...]], Awaitable[dict[str, Any] | None]]


async def react(
    provider: Provider,
    messages: list[dict[str, Any]],
    tools: ToolRegistry | None,
    max_iterations: int,
    *,
    context: ToolContext,
    out: ReactResult | None = None,
    on_tool_call: Callable[[ToolCall], Awaitable[None]] | None = None,
    max_tokens: int | None = None,
    tool_choice: ToolChoice | None = None,
    on_text: StepText | None = None,
    show_images: ShowImages | None = None,
    client_tools: tuple[dict[str, Any], ...] = (),
    first_choice: ToolChoice | None = None,
    options: ModelOptions | None = None,
) -> ReactResult:
    """Run until the model answers without tool calls; new messages accumulate in `out`
    as they happen, so a caller that is cancelled still holds the partial turn. Every tool
    call works for `context`. With `on_text`, each model call streams its text into it. With
    `show_images`, images tools return go to the next model call (and only to it).

    `client_tools` (an API client's) are offered beside ours; a step that calls one runs our
    own calls, then ends the loop with the client's in `pending`. `first_choice` is the first
    model call's tool_choice only; `options` go with every call."""
    result = out if out is not None else ReactResult(text=None)
    schemas = tools.schemas(context) if tools else None  # those offered to this chat
    theirs = {tool["function"]["name"] for tool in client_tools}
    if client_tools:
        schemas = [*(schemas or ()), *client_tools]
    shown: list[dict[str, Any]] = []  # sent with one model call, never kept in `out`
    for step in range(max_iterations):
        result.streamed = ""
        sink = None
        if on_text is not None:

            async def sink(piece: str, step: int = step) -> None:
                result.streamed += piece
                assert on_text is not None
                await on_text(step, piece)

        reply = await provider.complete(
            [*messages, *result.messages, *shown],
            schemas,
            max_tokens=max_tokens,
            tool_choice=first_choice if step == 0 and first_choice is not None else tool_choice,
            on_text=sink,
            options=options,
        )
        result.streamed = ""  # now part of the messages
        result.finish_reason = reply.finish_reason
        shown = []
        if reply.usage:
            result.usage.append(reply.usage)
        result.messages.append(reply.as_message())
        if not reply.tool_calls:
            result.text = reply.content or ""
            return result
        calls = tuple(c for c in reply.tool_calls if c.name not in theirs)
        result.pending = tuple(c for c in reply.tool_calls if c.name in theirs)
        if on_tool_call is not None:
            for call in calls:
                await on_tool_call(call)
        registry = tools or ToolRegistry()  # a hallucinated call gets an "unknown tool" answer
        outputs: list[ToolOutput] = []
        if all(registry.is_read_only(c.name) for c in calls):
            outputs += await asyncio.gather(
                *(registry.run(c.name, c.arguments, context) for c in calls)
            )
            result.messages.extend(map(_tool_message, calls, outputs))
        else:
            # Anything that may write runs in the order the model asked, each call seeing the
            # last one's effect: eight edits of one file at once kept only five.
            for call in calls:
                outputs.append(await registry.run(call.name, call.arguments, context))
                result.messages.append(_tool_message(call, outputs[-1]))
        if result.pending:
            result.text = reply.content or ""
            return result
        images = tuple(image for output in outputs for image in output.images)
        if images and show_images is not None and (message := await show_images(images)):
            shown = [message]
    return result


def _tool_message(call: ToolCall, output: ToolOutput) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": output.text}


def seal_tool_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give every tool call a result, so an interrupted turn is consistent when saved. A
    paused turn's calls of the client's tools (`waits`) are left for the client's results."""
    answered = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
    answered.update(i for m in messages for i in m.get("waits") or ())
    sealed = list(messages)
    for message in messages:
        for call in message.get("tool_calls") or ():
            if call["id"] not in answered:
                sealed.append(
                    {
                        "role": "tool",
                        "tool_call_id": call["id"],
                        "name": call["function"]["name"],
                        "content": CANCELLED_RESULT,
                    }
                )
    return sealed
