"""Who each model call is charged to, and the hooks that hear of every call's usage.

The work that calls a model (a chat's turn, the Consolidator, Dream, a background task) says
whom its calls are for with `charged_to(...)`; every model client the app builds is wrapped in
a MeteredProvider, which hands each answered call's usage, with that charge and the model's
name, to the hooks (the usage feature writes it down). A context variable carries the charge
because the calls happen deep inside react() and the providers, which know no chat, and
because each asyncio task keeps its own: concurrent turns of different chats never mix.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal

from loguru import logger

from nanomem.providers.provider import ModelOptions, Provider, Reply, TextSink, ToolChoice, Usage

# What a call was made for. "other": nothing said (a call outside the work named here).
Purpose = Literal["turn", "consolidation", "dream", "task", "other"]


@dataclass(frozen=True)
class Charge:
    session: str = ""  # the chat's session key (`channel:chat_id`); "" for the home's own work
    purpose: Purpose = "other"
    turn: str = ""  # groups the calls of one turn (a turn's model calls and tool steps)


_CHARGE: ContextVar[Charge | None] = ContextVar("nanomem_charge", default=None)
_NOBODY = Charge()


@contextmanager
def charged_to(session: str, purpose: Purpose, turn: str = "") -> Iterator[Charge]:
    """Model calls made inside (and in tasks started inside) are charged to this."""
    charge = Charge(session, purpose, turn)
    token = _CHARGE.set(charge)
    try:
        yield charge
    finally:
        _CHARGE.reset(token)


@dataclass(frozen=True)
class ModelCall:
    """One answered model call, as the hooks hear of it."""

    model: str  # as configured (`llm.model`): the name prices are looked up by
    usage: Usage
    charge: Charge
    at: float  # when it was answered (seconds since the epoch)


AfterCall = Callable[[ModelCall], Awaitable[None]]


class MeteredProvider:
    """A model client whose answered calls are told to `hooks` (a list the app's features
    add to after it is built); a failing hook is logged, never the call's failure."""

    def __init__(self, inner: Provider, model: str, hooks: list[AfterCall]) -> None:
        self.inner, self.model, self.hooks = inner, model, hooks

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
        reply = await self.inner.complete(
            messages,
            tools,
            max_tokens=max_tokens,
            tool_choice=tool_choice,
            on_text=on_text,
            options=options,
        )
        if reply.usage is not None and self.hooks:
            call = ModelCall(self.model, reply.usage, _CHARGE.get() or _NOBODY, time.time())
            for hook in self.hooks:
                try:
                    await hook(call)
                except Exception:  # the reply stands; only its record is missing
                    logger.exception("a model call's usage could not be recorded")
        return reply
