"""The model port: one `complete` call returning our own Reply type, plus retries around it."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from loguru import logger

ErrorCategory = Literal[
    "unreachable",
    "auth",
    "rate_limited",
    "quota",
    "context_too_long",
    "timeout",
    "not_found",
    "bad_request",
    "server",
    "empty",
]
RETRYABLE: frozenset[str] = frozenset({"unreachable", "rate_limited", "timeout", "server", "empty"})


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text as the model wrote it; validated by the tool registry


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class Reply:
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None
    finish_reason: str | None = None

    def as_message(self) -> dict[str, Any]:
        """The assistant message in OpenAI wire format, built by hand (no provider extras)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in self.tool_calls
            ]
        return message


@dataclass
class ProviderError(Exception):
    """A failed model call, reduced to a category the user can act on."""

    category: ErrorCategory
    detail: str = ""
    status: int | None = None
    retry_after: float | None = None
    attempts: int = field(default=1)

    def __str__(self) -> str:
        return f"{self.category}: {self.detail}" if self.detail else self.category

    @property
    def retryable(self) -> bool:
        return self.category in RETRYABLE


class Provider(Protocol):
    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        max_tokens: int | None = None,
    ) -> Reply: ...


class RetryingProvider:
    """Retries transient failures with exponential backoff and jitter; honours Retry-After."""

    def __init__(
        self,
        inner: Provider,
        max_retries: int,
        *,
        base_delay: float = 0.5,
        max_delay: float = 20.0,
        max_retry_after: float = 60.0,
    ) -> None:
        self.inner = inner
        self.max_retries = max_retries
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.max_retry_after = max_retry_after

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        max_tokens: int | None = None,
    ) -> Reply:
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self.inner.complete(messages, tools, max_tokens=max_tokens)
            except ProviderError as exc:
                exc.attempts = attempt
                delay = self._delay(exc, attempt)
                if delay is None:
                    raise
                logger.warning(
                    "model call failed ({}), retry {}/{} in {:.1f}s",
                    exc,
                    attempt,
                    self.max_retries,
                    delay,
                )
                await asyncio.sleep(delay)

    def _delay(self, exc: ProviderError, attempt: int) -> float | None:
        if not exc.retryable or attempt > self.max_retries:
            return None
        if exc.retry_after is not None:
            # A server asking for a long pause is better reported than waited out in silence.
            return exc.retry_after if exc.retry_after <= self.max_retry_after else None
        backoff = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        return backoff * (0.5 + random.random() / 2)
