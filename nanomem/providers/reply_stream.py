"""A streamed reply put back together: text pieces passed on as they arrive, tool-call deltas
assembled by index, the finish reason and usage taken from the chunks that carry them.

Both transports feed it (litellm's chunk objects and the direct client's SSE JSON), so the
two streams end in the same Reply and the same errors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nanomem.providers.provider import ProviderError, Reply, TextSink, ToolCall, Usage, usage_of
from nanomem.text.utf8 import clean_text


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class ReplyStream:
    """Collects one streamed reply; `finish()` turns it into a Reply or a ProviderError."""

    def __init__(self, on_text: TextSink | None) -> None:
        self.on_text = on_text
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self._text: list[str] = []
        self._held = ""  # a high surrogate whose pair may come in the next piece
        self._calls: dict[int, _Call] = {}

    async def text(self, piece: str) -> None:
        """Pass a content delta on, as valid UTF-8 (lone surrogates become U+FFFD)."""
        if self._held:
            piece, self._held = self._held + piece, ""
        if piece and "\ud800" <= piece[-1] <= "\udbff":
            piece, self._held = piece[:-1], piece[-1]
        if piece:
            await self._show(clean_text(piece))

    def tool_call(
        self, index: int, call_id: str | None, name: str | None, args: str | None
    ) -> None:
        """One tool-call delta: id and name arrive first, the arguments in pieces."""
        call = self._calls.get(index)
        if call is None:
            call = self._calls[index] = _Call()
        if call_id:
            call.id = call_id
        if name:
            call.name += name
        if args:
            call.arguments.append(args)

    def finished(self, reason: str | None) -> None:
        if reason:
            self.finish_reason = reason

    def set_usage(self, usage: Any) -> None:
        """The usage a chunk carries (the last, with `stream_options.include_usage`)."""
        self.usage = usage_of(usage)

    async def finish(self, *, ended: bool) -> Reply:
        """The whole Reply. `ended`: the stream said it was complete ([DONE] or a finish
        reason); a stream that just stops was cut, and its text is not a whole reply."""
        if self._held:
            held, self._held = self._held, ""
            await self._show(clean_text(held))
        if not (ended or self.finish_reason):
            raise ProviderError("server", "the reply stream ended before the reply was complete")
        content = "".join(self._text) if self._text else None
        calls = tuple(
            ToolCall(
                id=clean_text(call.id or f"call_{index}"),
                name=clean_text(call.name),
                arguments=clean_text("".join(call.arguments) or "{}"),
            )
            for index, call in sorted(self._calls.items())
        )
        if not calls and not (content and content.strip()):
            raise ProviderError("empty", "the model returned no text and no tool call")
        return Reply(content, calls, self.usage, self.finish_reason)

    async def _show(self, piece: str) -> None:
        self._text.append(piece)
        if self.on_text is not None:
            await self.on_text(piece)
