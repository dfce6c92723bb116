"""The Provider protocol (one `complete` call returning our own Reply type), the error
categories every transport maps its failures onto, and the retries around a provider."""

from __future__ import annotations

import asyncio
import copy
import json
import random
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn, Protocol

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
    "malformed",  # an answer came (HTTP 200) that is not a chat completion
]
# "none": answer in text even though tools are offered (summaries keep the chat's tool list so
# the provider's prompt cache serves them); "auto" is every API's default. An API client may
# also name one function: {"type": "function", "function": {"name": ...}}.
ToolChoice = Literal["none", "auto", "required"] | dict[str, Any]
# Receives the assistant's text piece by piece as the model writes it (streaming).
TextSink = Callable[[str], Awaitable[None]]
# A malformed answer may be a proxy's or a server's bad moment: worth the configured retries.
RETRYABLE: frozenset[str] = frozenset(
    {"unreachable", "rate_limited", "timeout", "server", "empty", "malformed"}
)
# What providers say when the prompt is too long (litellm's list, llama.cpp's wording).
_CONTEXT_PHRASES = (
    "context length",
    "maximum context",
    "exceed context limit",
    "model's maximum context limit",
    "exceeds the available context size",  # llama.cpp
    "input tokens exceed the configured limit",
    "exceeds the maximum number of tokens allowed",
)
_RATE_LIMIT = re.compile(r"rate[\s_\-]*limit")
_RATE_PHRASES = ("request too large", "service tier capacity exceeded")


class WireMessage(dict[str, Any]):
    """A message in the model API's format that a session hands out turn after turn: read-only,
    so its JSON can be encoded once and reused. Copies (`dict(m)`, deepcopy) are plain dicts."""

    __slots__ = ("_json",)

    def json(self) -> str:
        try:
            return self._json
        except AttributeError:
            self._json: str = json.dumps(self)
            return self._json

    def _read_only(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("a WireMessage is shared between turns; change a copy: dict(message)")

    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return copy.deepcopy(dict(self), memo)

    def __reduce__(self) -> tuple[type[dict[str, Any]], tuple[dict[str, Any]]]:
        return (dict, (dict(self),))


def encode_messages(messages: list[dict[str, Any]]) -> str:
    """The JSON array of `messages`, reusing each WireMessage's own encoding."""
    parts = (m.json() if isinstance(m, WireMessage) else json.dumps(m) for m in messages)
    return "[" + ", ".join(parts) + "]"  # json.dumps' own separator


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text as the model wrote it; validated by the tool registry


@dataclass(frozen=True)
class Usage:
    """A call's tokens as the provider reported them. `cached_tokens` (served from the
    provider's prompt cache) and `cache_write_tokens` (written to it) are part of
    `prompt_tokens`, as OpenAI counts them and litellm reports Anthropic's."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    cache_write_tokens: int = 0


_MAX_TOKENS = 10**12  # beyond any real call: a wild number is not added to anyone's totals


def usage_of(usage: Any) -> Usage | None:
    """Usage from a provider's report, a JSON object (the lean client) or litellm's object
    alike; None when there is none or its counts are not numbers. Cached prompt tokens are
    OpenAI's `prompt_tokens_details.cached_tokens`, else Anthropic's
    `cache_read_input_tokens`, else DeepSeek's `prompt_cache_hit_tokens`; those written to
    the cache Anthropic's `cache_creation_input_tokens` (litellm: `cache_write_tokens`)."""
    if usage is None:
        return None
    prompt = _tokens(_field(usage, "prompt_tokens"))
    completion = _tokens(_field(usage, "completion_tokens"))
    if prompt is None or completion is None:
        return None
    details = _field(usage, "prompt_tokens_details")
    cached = next(
        (
            found
            for found in (
                _tokens(_field(details, "cached_tokens")) if details is not None else None,
                _tokens(_field(usage, "cache_read_input_tokens")),
                _tokens(_field(usage, "prompt_cache_hit_tokens")),
            )
            if found
        ),
        0,
    )
    written = _tokens(_field(usage, "cache_creation_input_tokens")) or (
        _tokens(_field(details, "cache_write_tokens")) if details is not None else 0
    )
    return Usage(prompt, completion, min(cached, prompt), min(written or 0, prompt))


def _field(source: Any, name: str) -> Any:
    if isinstance(source, dict):
        return source.get(name)
    return getattr(source, name, None)


def _tokens(value: Any) -> int | None:
    """A count of tokens (None counts as 0); None when it is not a number."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return min(max(number, 0), _MAX_TOKENS)


@dataclass(frozen=True)
class ModelOptions:
    """What a caller asks of every model call of a turn beyond the messages (an API client's
    request): None or empty leaves the setting to nanomem's config and the model."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    parallel_tool_calls: bool | None = None
    # OpenAI's shape: {"type": "json_object"} or {"type": "json_schema", "json_schema": {...}}.
    response_format: dict[str, Any] | None = None


def sampling(options: ModelOptions, *, tools: bool) -> dict[str, Any]:
    """The request fields `options` set, besides max_tokens (whose name depends on the API),
    in OpenAI's names; parallel_tool_calls only beside tools (OpenAI refuses it alone)."""
    fields: dict[str, Any] = {
        name: value
        for name in ("temperature", "top_p", "seed", "presence_penalty", "frequency_penalty")
        if (value := getattr(options, name)) is not None
    }
    if options.stop:
        fields["stop"] = list(options.stop)
    if tools and options.parallel_tool_calls is not None:
        fields["parallel_tool_calls"] = options.parallel_tool_calls
    if options.response_format is not None:
        fields["response_format"] = options.response_format
    return fields


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
    shown: str = ""  # text already streamed to the person before the failure

    def __str__(self) -> str:
        return f"{self.category}: {self.detail}" if self.detail else self.category

    @property
    def retryable(self) -> bool:
        return self.category in RETRYABLE


def categorize(status: int | None, text: str) -> ErrorCategory:
    """The category of a failed model call from its HTTP status (None when no answer came)
    and its error text: one set of rules for every transport."""
    lowered = text.lower()
    code = status or 0
    if any(phrase in lowered for phrase in _CONTEXT_PHRASES):
        return "context_too_long"
    # Any error that talks of a rate limit is one, whatever its status (litellm agrees).
    if code == 429 or _RATE_LIMIT.search(lowered) or any(p in lowered for p in _RATE_PHRASES):
        return "quota" if "quota" in lowered or "billing" in lowered else "rate_limited"
    if code in (408, 504) or "a timeout occurred" in lowered:
        return "timeout"
    if "missing credentials" in lowered or "no api key" in lowered:
        return "auth"  # the OpenAI SDK says this before sending anything, as a "500"
    if code in (0, 500) and "connect" in lowered:
        return "unreachable"  # a refused connection, or a proxy that could not reach the model
    if code in (401, 403):
        return "auth"
    if code == 404 or ("model_not_found" in lowered and "invalid_request_error" in lowered):
        return "not_found"
    if code == 409 or code >= 500:
        return "server"
    if 400 <= code < 500:
        return "bad_request"
    return "unreachable" if "connection" in lowered else "server"


class Provider(Protocol):
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
        """One model call. With `on_text`, stream: each piece of the reply's text is awaited
        into it as it arrives (the Reply still holds it all); a failure after some text was
        given to it raises ProviderError with that text in `shown`. `options` (an API
        client's) go to the model as they are, over the configured ones."""
        ...


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
        tool_choice: ToolChoice | None = None,
        on_text: TextSink | None = None,
        options: ModelOptions | None = None,
    ) -> Reply:
        shown: list[str] = []

        async def show(piece: str) -> None:
            shown.append(piece)
            assert on_text is not None
            await on_text(piece)

        attempt = 0
        while True:
            attempt += 1
            try:
                return await self.inner.complete(
                    messages,
                    tools,
                    max_tokens=max_tokens,
                    tool_choice=tool_choice,
                    on_text=show if on_text is not None else None,
                    options=options,
                )
            except ProviderError as exc:
                exc.attempts = attempt
                if shown:  # the person saw part of a reply: a retry would repeat it
                    exc.shown = "".join(shown)
                    raise
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
