"""What an API client adds to one turn: its own tools, its instructions, the model options it
asks for, the structured answer it wants, and the results of its tools when a paused turn
goes on. The channel builds a ClientTurn from the request (channels/api); the core runs it.

A turn that calls a client's tool pauses: the core answers with `Paused` (the calls), keeps
the turn in the session, and goes on when the client's next request brings the results.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nanomem.providers import ModelOptions, ToolCall

__all__ = ["CLIENT_REQUEST", "SCHEMA_UNMET", "ClientTurn", "ModelOptions", "Paused", "ToolResult"]

# Error categories of a turn the client's request made impossible (OutboundMessage Text with
# style "error"): CLIENT_REQUEST is a 400 (a tool named like ours, a result for an unknown or
# expired call), SCHEMA_UNMET a 422 (the answer did not fit response_format after a re-ask).
CLIENT_REQUEST = "client_request"
SCHEMA_UNMET = "schema_unmet"


@dataclass(frozen=True)
class ToolResult:
    """A client tool's result for one call of a paused turn (a `role: tool` message)."""

    call_id: str
    content: str


@dataclass(frozen=True)
class ClientTurn:
    # OpenAI chat-completions function tools, as checked by the channel:
    # {"type": "function", "function": {"name", "description", "parameters", "strict"}}.
    tools: tuple[dict[str, Any], ...] = ()
    # "auto" | "none" | "required" | {"type": "function", "function": {"name": ...}}; it
    # applies to the turn's first model call only (never a loop of forced calls).
    tool_choice: str | dict[str, Any] | None = None
    # The request's system and developer messages, in order: added after nanomem's own
    # prompt, marked as the client's; never saved as the person's words.
    instructions: tuple[str, ...] = ()
    # Sampling, limits and response_format for every model call of the turn.
    options: ModelOptions = field(default_factory=ModelOptions)
    # A paused turn going on: the results of its client calls (the message's text is empty).
    results: tuple[ToolResult, ...] = ()
    # How long a paused turn waits for its results before it is closed (api.tool_wait_s).
    wait_s: float = 600.0
    # The Responses API's id for this turn's answer (saved with it), and the answer a request
    # says it follows (previous_response_id): a 400 when this session has no such answer.
    reply_id: str = ""
    follows: str = ""


@dataclass(frozen=True)
class Paused:
    """An OutboundMessage part: the turn waits for the client's tools. `text` is what the
    model wrote beside the calls; `calls` are the client's calls only (ours have run)."""

    text: str
    calls: tuple[ToolCall, ...]
