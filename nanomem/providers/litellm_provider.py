"""The one module that imports litellm (lazily: it costs ~2 s and must never reach the internet)."""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import threading
from types import ModuleType
from typing import Any

from loguru import logger

from nanomem.config import LLMSettings
from nanomem.providers.provider import (
    ErrorCategory,
    ModelOptions,
    ProviderError,
    Reply,
    TextSink,
    ToolCall,
    ToolChoice,
    categorize,
    sampling,
    usage_of,
)
from nanomem.providers.reply_stream import ReplyStream
from nanomem.text.utf8 import clean_text

# What litellm says when a response arrived but is not a chat completion.
# How litellm says an answer came that it cannot read (it calls most of them connection errors).
_MALFORMED = (
    "Invalid response object",
    "Unable to get json response",
    "no 'choices'",
    "'choices' that is not a list",
    "object has no attribute",  # a stream chunk of the wrong shape
)
# What litellm reads from the environment, for the process's life once it is imported.
SWITCHES = {
    # Without these, importing litellm fetches a price map and tokenizers from the internet.
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "HF_HUB_OFFLINE": "1",
    # Per-call CPU (tests/benchmarks); the first is read at import time, the second on every
    # call. Skip litellm's base64-redaction copy of every message for its logging payload (it
    # walks the whole prompt on each call; we register no logging callbacks).
    "MAX_BASE64_LENGTH_FOR_LOGGING": "0",
    # OpenAI-compatible calls through litellm's own HTTP handler instead of the OpenAI SDK,
    # whose request "transform" walks every message by type introspection (~0.25 ms a message:
    # 130 ms a turn with a full 64k-token window, 8x less this way). It also reads an answer
    # that is not JSON as such (the SDK path calls it a server error).
    "EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER": "True",
}
_import_lock = threading.Lock()
_module: ModuleType | None = None


def import_litellm() -> ModuleType:
    """Import and configure litellm once; safe to call from a warm-up thread."""
    global _module
    with _import_lock:
        if _module is None:
            for name, value in SWITCHES.items():  # setdefault: a person may opt out
                os.environ.setdefault(name, value)
            import litellm

            # The first call would otherwise import what it needs lazily: the OpenAI SDK's
            # resources (~0.5 s) on the SDK path; on litellm's own path only its tokenizer
            # module (tiktoken's table is shared with nanomem's budget, which loads it anyway).
            own_http = os.environ["EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER"].strip().lower()
            importlib.import_module(
                "litellm.litellm_core_utils.default_encoding"
                if own_http == "true"
                else "openai.resources"
            )
            litellm.suppress_debug_info = True
            litellm.drop_params = True
            litellm.telemetry = False
            logging.getLogger("LiteLLM").setLevel(logging.WARNING)
            _module = litellm
    return _module


class LiteLLMProvider:
    """Talks to any model litellm supports; converts its objects and errors into ours."""

    def __init__(self, settings: LLMSettings, *, model: str | None = None) -> None:
        self.settings = settings
        self.model = model or settings.model
        self._schemas: bool | None = None  # whether litellm says the model follows a schema

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
        # Never wait for the import on the event loop: Ctrl-C and other chats must stay live.
        litellm = _module if _module is not None else await asyncio.to_thread(import_litellm)
        asked = options.max_tokens if options is not None else None
        kwargs: dict[str, Any] = {
            "model": self.model,
            # Copies: some of litellm's provider adapters edit messages in place, and a
            # session hands out the same message objects turn after turn.
            "messages": [dict(message) for message in messages],
            "timeout": self.settings.timeout_s,
            "max_retries": 0,  # we retry ourselves, on categories, with backoff
            "max_tokens": asked or max_tokens or self.settings.max_tokens,
        }
        if tools:
            kwargs["tools"] = tools
            if tool_choice is not None:
                kwargs["tool_choice"] = tool_choice
        if self.settings.api_base:
            kwargs["api_base"] = self.settings.api_base
            if not _placed(litellm, self.model, self.settings.api_base):
                kwargs["custom_llm_provider"] = "openai"  # the server's own name, sent as is
        if self.settings.api_key is not None:
            kwargs["api_key"] = self.settings.api_key.get_secret_value()
        if not kwargs.get("api_key") and _openai_key_missing(litellm, self.model, kwargs):
            raise ProviderError("auth", "Missing credentials: no API key for an OpenAI model")
        if self.settings.temperature is not None:
            kwargs["temperature"] = self.settings.temperature
        if options is not None:
            fields = sampling(options, tools=bool(tools))
            if _schema_format(fields) and not self._follows_schemas(litellm):
                # Said before anything is sent: the caller asks for the answer by prompt.
                raise ProviderError(
                    "bad_request", f"response_format json_schema is not supported by {self.model}"
                )
            kwargs.update(fields)
        if on_text is not None:
            kwargs["stream"] = True
            kwargs["stream_options"] = {"include_usage": True}  # usage in the last chunk
        try:
            response = await litellm.acompletion(**kwargs)
        except Exception as exc:
            raise classify(exc) from None
        if on_text is None:
            return _to_reply(response)
        stream = ReplyStream(on_text)
        try:
            async for chunk in response:
                await _apply(chunk, stream)
        except ProviderError:
            raise
        except Exception as exc:
            error = classify(exc)
            if error.category == "unreachable":  # the answer had begun: it was cut
                error.category, error.detail = "server", f"the answer was cut: {error.detail}"
            raise error from None
        return await stream.finish(ended=False)

    def _follows_schemas(self, litellm: ModuleType) -> bool:
        if self._schemas is None:
            try:
                self._schemas = bool(litellm.supports_response_schema(model=self.model))
            except Exception:  # an unknown model: litellm cannot say, so it is not assumed
                self._schemas = False
        return self._schemas


def _schema_format(fields: dict[str, Any]) -> bool:
    answer = fields.get("response_format")
    return isinstance(answer, dict) and answer.get("type") == "json_schema"


async def _apply(chunk: Any, stream: ReplyStream) -> None:
    """One of litellm's stream chunks: text and tool-call deltas, finish reason, usage."""
    usage = getattr(chunk, "usage", None)
    if usage is not None:
        stream.set_usage(usage)
    for choice in getattr(chunk, "choices", None) or ():
        delta = getattr(choice, "delta", None)
        text = getattr(delta, "content", None)
        if isinstance(text, str) and text:
            await stream.text(text)
        for position, call in enumerate(getattr(delta, "tool_calls", None) or ()):
            index = getattr(call, "index", None)
            fn = getattr(call, "function", None)
            stream.tool_call(
                index if isinstance(index, int) else position,
                _str(getattr(call, "id", None)),
                _str(getattr(fn, "name", None)),
                _str(getattr(fn, "arguments", None)),
            )
        stream.finished(_str(getattr(choice, "finish_reason", None)))


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _placed(litellm: ModuleType, model: str, api_base: str) -> bool:
    """Whether litellm knows which provider serves `model` (a prefix, or a name it lists)."""
    try:
        litellm.get_llm_provider(model, api_base=api_base)
    except Exception:
        return False
    return True


def _openai_key_missing(litellm: ModuleType, model: str, kwargs: dict[str, Any]) -> bool:
    """A keyless call to OpenAI itself is refused before it leaves (clearer than its 401);
    a server of one's own at `api_base` (Ollama, llama.cpp, vLLM) may well need no key."""
    if kwargs.get("api_base"):
        return False
    try:
        _, provider, key, _ = litellm.get_llm_provider(model, api_base=kwargs.get("api_base"))
    except Exception:
        return False  # litellm's own call will raise the real error
    fallback = litellm.api_key or litellm.openai_key or os.environ.get("OPENAI_API_KEY")
    return provider == "openai" and not (key or fallback)


def litellm_supports_images(model: str) -> bool:
    """litellm's model list says whether `model` takes images; unknown models do not."""
    try:
        return bool(import_litellm().supports_vision(model=model))
    except Exception:
        return False


def _to_reply(response: Any) -> Reply:
    """Our Reply from litellm's response; a response without a usable message is a
    retryable fault, and all text is made valid UTF-8 before anyone stores it."""
    try:
        choice = response.choices[0]
        message = choice.message
        calls = tuple(
            ToolCall(
                id=clean_text(call.id or f"call_{index}"),
                name=clean_text(call.function.name or ""),
                arguments=clean_text(call.function.arguments or "{}"),
            )
            for index, call in enumerate(message.tool_calls or ())
        )
        content = message.content
        finish_reason = choice.finish_reason
    except (LookupError, AttributeError, TypeError):
        shape = "no choices" if not getattr(response, "choices", None) else "no message"
        raise ProviderError("malformed", f"malformed response: {shape}") from None
    content = clean_text(content) if isinstance(content, str) else None
    if not calls and not (content and content.strip()):
        raise ProviderError("empty", "the model returned no text and no tool call")
    usage = getattr(response, "usage", None)
    return Reply(
        content=content,
        tool_calls=calls,
        usage=usage_of(usage),
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
    )


def classify(exc: Exception) -> ProviderError:
    """Map any litellm/OpenAI error to a category; decide on status codes, not class names."""
    status = getattr(exc, "status_code", None)
    name = type(exc).__name__
    text = str(exc)
    category: ErrorCategory
    # litellm's exception classes say a little more than the status; the rest is shared.
    if any(phrase in text for phrase in _MALFORMED) or _not_json(exc):
        category = "malformed"  # an answer came, but not one we can read
    elif "Timeout" in name:
        category = "timeout"
    elif "ContextWindowExceeded" in name:
        category = "context_too_long"
    elif "APIConnectionError" in name:
        category = "unreachable"
    elif "Authentication" in name or "PermissionDenied" in name:
        category = "auth"
    elif "NotFound" in name:
        category = "not_found"
    else:
        category = categorize(status if isinstance(status, int) else None, text)
    logger.debug("provider error {} (status {}): {}", name, status, text[:500])
    return ProviderError(category, f"{name}: {text[:300]}", status, _retry_after(exc))


def _not_json(exc: BaseException) -> bool:
    """An answer came that was not JSON: on the OpenAI SDK's path litellm calls that a server
    error (500), but the JSON error it ran into is still in the chain of causes."""
    seen: BaseException | None = exc
    for _ in range(8):  # the chain is short; a cycle must not hang the classification
        if seen is None:
            return False
        if isinstance(seen, json.JSONDecodeError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _retry_after(exc: Exception) -> float | None:
    # litellm keeps the real headers here; `exc.response.headers` is empty.
    headers: Any = getattr(exc, "litellm_response_headers", None) or getattr(
        getattr(exc, "response", None), "headers", None
    )
    if not headers:
        return None
    value = headers.get("retry-after") or headers.get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None
