"""What an API client adds to one turn: its own tools, its instructions, the model options it
asks for, the structured answer it wants, and the results of its tools when a paused turn
goes on. The channel builds a ClientTurn from the request (channels/api); the core runs it:
ClientRun here for the turn's model calls, agent/paused_turns.py for the turn in its session.

A turn that calls a client's tool pauses: the core answers with `Paused` (the calls), keeps
the turn in the session, and goes on when the client's next request brings the results.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from nanomem.agent import structured
from nanomem.agent.outbound import Paused
from nanomem.agent.react_loop import ReactResult, ShowImages, StepText, react
from nanomem.pools import CLIENT_SCHEMAS
from nanomem.providers import ModelOptions, Provider, ProviderError, ToolCall, ToolChoice

if TYPE_CHECKING:
    from nanomem.agent.paused_turns import ClientTurns
    from nanomem.memory import Budget
    from nanomem.tools import ToolContext, ToolRegistry

__all__ = [
    "CLIENT_REQUEST",
    "SCHEMA_UNMET",
    "ClientRun",
    "ClientTurn",
    "ModelOptions",
    "Paused",
    "ToolResult",
]

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
    # applies to this request's first model call only (never a loop of forced calls), a
    # continuation's as much as the turn's first request's: OpenAI applies a request's
    # tool_choice to its model call. With "none" the client's tools are not offered to any
    # of this request's model calls.
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


@dataclass
class ClientRun:
    """One request's part in its turn: the client's tools offered beside ours, its
    instructions after our system prompt, its options on every model call, and its
    response_format asked of the model (natively, or by prompt) and checked."""

    client: ClientTurn
    turns: ClientTurns
    unmet: str | None = None  # why the answer missed response_format after the re-ask
    prompted: bool = False  # the model refused this turn's response_format: asked by prompt
    tag: str = field(default_factory=lambda: secrets.token_hex(4))  # its instructions' markers

    @property
    def native(self) -> bool:
        return self.turns.native and not self.prompted

    @property
    def tools(self) -> tuple[dict[str, Any], ...]:
        """The client's tools offered to the model: none when it said tool_choice "none", so
        a model that calls one anyway is told it is unknown instead of pausing the turn."""
        return () if self.client.tool_choice == "none" else self.client.tools

    @property
    def form(self) -> dict[str, Any] | None:
        return self.client.options.response_format

    def system(self) -> list[dict[str, Any]]:
        """The client's instructions (and the asked form, when it goes by prompt) as one
        system message; never saved in the session."""
        prompted = self.form is not None and not self.native
        if not self.client.instructions and not prompted:
            return []
        schema = structured.schema_text(self.form) if self.form is not None and prompted else None
        text = self.turns.templates.render(
            "client_instructions.md.j2",
            instructions=list(self.client.instructions),
            schema=schema,
            tag=self.tag,  # not known to the client: its text cannot close its block early
        )
        return [{"role": "system", "content": text}]

    def tokens(self, budget: Budget) -> int:
        """What the turn's every prompt carries for the client, in tokens."""
        tools = budget.count_tools(json.dumps(self.tools)) if self.tools else 0
        return tools + sum(budget.count(message) for message in self.system())

    def options(self) -> ModelOptions:
        if self.form is None or self.native:
            return self.client.options
        return replace(self.client.options, response_format=None)

    async def react(
        self,
        provider: Provider,
        messages: list[dict[str, Any]],
        tools: ToolRegistry | None,
        max_iterations: int,
        *,
        context: ToolContext,
        out: ReactResult,
        on_tool_call: Callable[[ToolCall], Awaitable[None]] | None = None,
        on_text: StepText | None = None,
        show_images: ShowImages | None = None,
    ) -> ReactResult:
        """react() for the turn (`messages` begin with our system prompt), with the answer
        checked against response_format and re-asked once; marked for the session."""
        head, rest = messages[:1], messages[1:]

        # `first`: this call is the request's first model call, where its tool_choice applies.
        async def run(prompt: list[dict[str, Any]], into: ReactResult, first: bool) -> None:
            await react(
                provider,
                [*head, *self.system(), *prompt],
                tools,
                max_iterations,
                context=context,
                out=into,
                on_tool_call=on_tool_call,
                # A checked answer is shown once it is checked, never a wrong one first.
                on_text=on_text if self.form is None else None,
                show_images=show_images,
                client_tools=self.tools,
                first_choice=cast(ToolChoice, self.client.tool_choice) if first else None,
                options=self.options(),
            )

        try:
            await run(rest, out, True)
        except ProviderError as exc:
            if self.form is None or not self.native or not _names_format(exc):
                raise
            self.prompted = True  # the form goes into the prompt, for this turn; and for
            # every later one when the model cannot do it at all (not just this schema)
            self.turns.native = self.turns.native and not _unsupported(exc)
            await run(rest, out, not out.messages)  # `out` goes on
        if (
            self.form is not None
            and _whole(out)
            and (wrong := await _problem(out.text or "", self.form))
        ):
            await self._ask_again(run, rest, out, wrong)
        self._mark(out)
        return out

    async def _ask_again(
        self,
        run: Callable[[list[dict[str, Any]], ReactResult, bool], Awaitable[None]],
        rest: list[dict[str, Any]],
        out: ReactResult,
        wrong: str,
    ) -> None:
        """Once: the wrong answer and what was wrong with it go to the model (neither is
        saved), and its next answer stands, or is unmet."""
        assert self.form is not None
        answer = out.messages.pop()
        note = self.turns.templates.render(
            "schema_reask.md.j2", problem=wrong, schema=structured.schema_text(self.form)
        )
        again = ReactResult(text=None)
        await run([*rest, *out.messages, answer, {"role": "user", "content": note}], again, False)
        out.messages.extend(again.messages)
        out.usage.extend(again.usage)
        out.text, out.pending, out.finish_reason = again.text, again.pending, again.finish_reason
        if _whole(out):
            self.unmet = await _problem(out.text or "", self.form)

    def _mark(self, out: ReactResult) -> None:
        """The turn's last assistant message, as the session keeps it: what it waits for and
        until when, the Responses API's id of the answer, a cut at max_tokens, an unmet form."""
        at = next(
            (
                i
                for i in range(len(out.messages) - 1, -1, -1)
                if out.messages[i]["role"] == "assistant"
            ),
            None,
        )
        if at is None:
            return
        marks: dict[str, Any] = {}
        if out.pending:
            marks["waits"] = [call.id for call in out.pending]
            marks["until"] = round(time.time() + self.client.wait_s, 3)
        if self.client.reply_id:
            marks["reply_id"] = self.client.reply_id
        if out.finish_reason == "length":
            marks["truncated"] = True
        if self.unmet is not None:
            marks["failed"] = SCHEMA_UNMET  # a retry asks afresh; later turns see what it said
        if marks:
            out.messages[at] = {**out.messages[at], **marks}


def _whole(out: ReactResult) -> bool:
    """An answer to check against response_format: not a pause, not the iteration limit's
    end, and not cut at max_tokens (sent as cut, never re-asked: a second answer within the
    same limit would be cut too)."""
    return not out.pending and out.text is not None and out.finish_reason != "length"


async def _problem(text: str, form: dict[str, Any]) -> str | None:
    """structured.problem, in its pool's thread: a check may take up to its time budget."""
    return await CLIENT_SCHEMAS.run(structured.problem, text, form)


def _unsupported(exc: ProviderError) -> bool:
    text = str(exc).lower()
    return "support" in text or "unknown" in text or "unrecognized" in text


def _names_format(exc: ProviderError) -> bool:
    """A refusal of response_format itself (the model or its server cannot do it)."""
    text = str(exc).lower()
    return exc.category == "bad_request" and ("response_format" in text or "json_schema" in text)
