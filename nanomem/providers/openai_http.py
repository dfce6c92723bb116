"""A lean client for OpenAI-compatible `/chat/completions` (where providers/routing.py sends
OpenAI-compatible endpoints, and every model with `llm.transport = "direct"`).

litellm spends milliseconds of CPU per call (cost maps, logging, request transforms) and
seconds on its import; this does one POST over a shared pool of kept-alive connections
(connection.py, on httpcore), streams the reply as server-sent events when asked to, and maps
answers and failures onto the same Reply and ProviderError categories as
`litellm_provider.classify`. It never retries: RetryingProvider does that.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from typing import Any

from loguru import logger

from nanomem.config import LLMSettings
from nanomem.providers import connection
from nanomem.providers.connection import Body, Connection, ConnectionFailed
from nanomem.providers.provider import (
    ModelOptions,
    ProviderError,
    Reply,
    TextSink,
    ToolCall,
    ToolChoice,
    categorize,
    encode_messages,
    sampling,
    usage_of,
)
from nanomem.providers.reply_stream import ReplyStream
from nanomem.providers.routing import Route, route
from nanomem.text import untrusted_json
from nanomem.text.utf8 import clean_text

_CONNECTIONS = 256  # one connection per concurrent chat; the default of 100 would queue them
_MAX_LINE = 64 * 2**20  # one server-sent event (a whole tool call's arguments may be one)
_MAX_ERROR = 64 * 1024  # of an error's body: its explanation is at the start


class OpenAIHTTPProvider:
    """Talks to one OpenAI-compatible endpoint; converts its JSON and errors into ours."""

    def __init__(self, settings: LLMSettings, path: Route | None = None) -> None:
        self.settings = settings
        if path is None or path.path != "direct":
            path = route(settings)
            if path.path != "direct":  # litellm's choice, but this client was asked for
                path = route(settings.model_copy(update={"transport": "direct"}))
        self.route = path
        self.model = path.model  # without litellm's provider prefix
        # Same fallbacks as litellm: settings, then the provider's environment variables.
        self.base_url = path.base_url
        self.url = f"{self.base_url}/chat/completions"
        key = settings.api_key.get_secret_value() if settings.api_key is not None else ""
        key = key or os.environ.get(path.key_variable or "OPENAI_API_KEY", "")
        self._key = key.strip()  # keys hold no spaces; a pasted one may end in a line break
        self._headers = {b"Content-Type": b"application/json"}
        if self._key and not _header_problem(self._key):
            # Latin-1, as HTTP/1.1 allows (httpx would send only ASCII from a str).
            self._headers[b"Authorization"] = f"Bearer {self._key}".encode("latin-1")
        self._session: Connection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tools: tuple[list[dict[str, Any]], str] | None = None  # the last ones, encoded
        connection.load(self.url)

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
        if problem := _header_problem(self._key):
            # The only header of the person's making is the key's.
            raise ProviderError("auth", f"the API key cannot be sent: {problem}")
        if not self._key and self.route.needs_key:
            # A hosted API would answer 401 anyway; a local server may legitimately need no key.
            variable = self.route.key_variable or "llm.api_key"
            raise ProviderError("auth", f"Missing credentials: no API key (set {variable})")
        asked = options.max_tokens if options is not None else None
        body: dict[str, Any] = {
            "model": self.model,
            self.route.max_tokens_field: asked or max_tokens or self.settings.max_tokens,
        }
        if on_text is not None:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}  # usage in the last chunk
        if tools and tool_choice is not None:
            body["tool_choice"] = tool_choice
        if self.settings.temperature is not None:
            body["temperature"] = self.settings.temperature
        if options is not None:
            body.update(sampling(options, tools=bool(tools)))
        # The replayed history is most of the request, and its messages arrive encoded; the
        # tools' schemas (a few KB) are encoded once for as long as they stay the same.
        head = json.dumps(body)[:-1] + (f', "tools": {self._encoded(tools)}' if tools else "")
        data = f'{head}, "messages": {encode_messages(messages)}}}'.encode()
        answered = False  # a cut after the answer began is the server's fault, not the network's
        try:
            # No redirects (a 3xx is an error): following one could carry the key elsewhere.
            async with self._client().post(data, self._headers) as resp:
                answered = True
                if not 200 <= resp.status < 300:
                    # The status decides the category, even when its body is cut or endless.
                    raw = await resp.excerpt(_MAX_ERROR)
                    raise self._error(resp.status, raw, resp.headers.get("retry-after"))
                if on_text is not None and resp.content_type == "text/event-stream":
                    return await _read_events(resp, ReplyStream(on_text))
                raw = await resp.read()
        except TimeoutError:  # connecting, or silence for longer than the timeout
            seconds = f"{self.settings.timeout_s:g} s"
            detail = f"silent for {seconds} mid-answer" if answered else f"no answer in {seconds}"
            raise ProviderError("timeout", detail, 408) from None
        except ConnectionFailed as exc:  # refused, reset, DNS, TLS, truncated body, bad URL
            detail = self._safe(str(exc))
            if answered and exc.answered:
                raise ProviderError("server", f"the answer was cut: {detail}") from None
            raise ProviderError("unreachable", detail) from None
        reply = _to_reply(raw)
        if on_text is not None and reply.content:  # a server that does not stream: one piece
            await on_text(reply.content)
        return reply

    def _encoded(self, tools: list[dict[str, Any]]) -> str:
        """The tools as JSON. The registry hands out the same list until a tool changes (then a
        new one), so a list seen last time is not encoded again (~0.1 ms a call)."""
        if self._tools is None or self._tools[0] is not tools:
            self._tools = (tools, json.dumps(tools))
        return self._tools[1]

    async def close(self) -> None:
        """Close the shared session; one made in another (finished) loop can only be dropped."""
        session, self._session = self._session, None
        if session is not None and self._loop is asyncio.get_running_loop():
            await session.close()

    def _client(self) -> Connection:
        """The shared pool, made lazily: its connections belong to the loop it is made in."""
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            # A pool from another (usually finished) loop cannot be used or closed here.
            # Connecting and each read (silence) are bounded, not the whole call: a long reply
            # streams for as long as the model keeps writing.
            seconds = self.settings.timeout_s
            self._session = Connection(
                self.url,
                timeout_s=seconds,
                connections=_CONNECTIONS,
                configured=self.settings.proxy,
            )
            self._loop = loop
        return self._session

    def _error(self, status: int, raw: bytes, retry_after: str | None) -> ProviderError:
        text = raw.decode("utf-8", "replace")
        category = categorize(status, text)
        logger.debug("provider error (status {}): {}", status, self._safe(text[:500]))
        detail = self._safe(f"HTTP {status}: {_message(text)[:300]}")
        return ProviderError(category, detail, status, _seconds(retry_after))

    def _safe(self, text: str) -> str:
        # Servers and proxies sometimes echo the request; the key must never reach a log or chat.
        return text.replace(self._key, "***") if self._key else text


async def _read_events(content: Body, stream: ReplyStream) -> Reply:
    """Server-sent events (`data: {chunk}` lines, then `data: [DONE]`) into a Reply."""
    ended = False
    while line := await content.readline(_MAX_LINE):
        if not line.startswith(b"data:"):
            continue  # blank separators, ": keep-alive" comments, "event:" lines
        data = line[5:].strip()
        if data == b"[DONE]":
            ended = True
            break
        try:
            chunk = untrusted_json.loads(data)
        except ValueError:
            snippet = " ".join(data[:120].decode("utf-8", "replace").split())
            raise ProviderError("malformed", f"malformed stream chunk: {snippet!r}") from None
        await _apply(chunk, stream)
    return await stream.finish(ended=ended)


async def _apply(chunk: Any, stream: ReplyStream) -> None:
    """One chunk: a text delta, tool-call deltas, a finish reason, usage, or an error."""
    try:
        error = chunk.get("error")
        if error is not None:  # some hosts (OpenRouter) report a failure mid-stream this way
            text = _message(json.dumps({"error": error}))
            code = error.get("code") if isinstance(error, dict) else None
            status = code if isinstance(code, int) else None
            raise ProviderError(categorize(status, text), f"in the stream: {text[:300]}", status)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            stream.set_usage(usage)
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            piece = delta.get("content")
            if piece is not None and not isinstance(piece, str):
                raise TypeError(piece)
            if piece:
                await stream.text(piece)
            for position, call in enumerate(delta.get("tool_calls") or ()):
                index = call.get("index")
                fn = call.get("function") or {}
                stream.tool_call(
                    index if isinstance(index, int) else position,
                    _str(call.get("id")),
                    _str(fn.get("name")),
                    _arguments(fn["arguments"]) if fn.get("arguments") else None,
                )
            stream.finished(_str(choice.get("finish_reason")))
    except (AttributeError, TypeError, KeyError):
        snippet = " ".join(json.dumps(chunk)[:120].split())
        raise ProviderError("malformed", f"malformed stream chunk: {snippet!r}") from None


def _header_problem(key: str) -> str:
    """Why the key cannot be sent in a header ("" when it can): nothing is sent then."""
    if "\r" in key or "\n" in key:
        return "a header value holds a line break"  # never a second request
    try:
        key.encode("latin-1")
    except UnicodeEncodeError:
        return "a header value is not Latin-1 text (check the API key)"
    return ""


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _message(text: str) -> str:
    """The human part of an OpenAI-style error body, else the (trimmed) body itself."""
    try:
        error = untrusted_json.loads(text).get("error")
    except (ValueError, AttributeError):
        return " ".join(text.split())
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return error if isinstance(error, str) else " ".join(text.split())


def _seconds(value: str | None) -> float | None:
    """Retry-After in seconds; an HTTP-date form is ignored, like litellm's adapter does."""
    try:
        seconds = float(value) if value is not None else math.nan
    except ValueError:
        return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _to_reply(raw: bytes) -> Reply:
    """Our Reply from the response body. A body that is not a chat completion (no choices, no
    message, a role or content of the wrong kind, not JSON) is "malformed", one whose message
    says nothing "empty": both retryable. All text is made valid UTF-8."""
    snippet = " ".join(raw[:120].decode("utf-8", "replace").split())
    try:
        data = untrusted_json.loads(raw.decode("utf-8", "replace"))
        choice = data["choices"][0]
        message = choice["message"]
        content = message.get("content")
        # A server may leave the role out; one that names another, or null, sent no answer.
        if message.get("role", "assistant") != "assistant" or not isinstance(content, str | None):
            raise TypeError(message)
        calls = tuple(
            ToolCall(
                id=clean_text(str(call.get("id") or f"call_{index}")),
                name=clean_text(str(call["function"].get("name") or "")),
                arguments=clean_text(_arguments(call["function"].get("arguments"))),
            )
            for index, call in enumerate(message.get("tool_calls") or ())
        )
        usage = data.get("usage")
        finish_reason = choice.get("finish_reason")
    except (ValueError, LookupError, TypeError, AttributeError):
        raise ProviderError("malformed", f"malformed response: {snippet!r}") from None
    content = clean_text(content) if content is not None else None
    if not calls and not (content and content.strip()):
        raise ProviderError("empty", "the model returned no text and no tool call")
    return Reply(
        content=content,
        tool_calls=calls,
        usage=usage_of(usage) if isinstance(usage, dict) else None,
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
    )


def _arguments(value: Any) -> str:
    # Kept as the raw text (malformed JSON included): the tool registry validates it.
    if isinstance(value, str):
        return value or "{}"
    return "{}" if value is None else json.dumps(value)
