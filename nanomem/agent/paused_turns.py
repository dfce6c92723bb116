"""An API client's turn in its session: checked before anything of a request is saved, paused
on the client's tools, gone on with when their results come, closed when nobody went on.

In the session a paused turn is its assistant message with the calls, marked with the ids of
the client's calls it waits for (`waits`) and until when (`until`, Unix time); the client's
results follow it as tool messages marked `client`. A paused turn nobody goes on with gets a
result for each call saying none came (`closed`): when its time is up (a timer), when another
message arrives in the session first, and, after a restart, whichever of those comes first.
Every look into the session starts at its end and is bounded (agent/replay.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from nanomem.agent import structured
from nanomem.agent.client_turn import CLIENT_REQUEST, SCHEMA_UNMET, ClientRun, ClientTurn
from nanomem.agent.outbound import OutboundMessage, Paused, Text
from nanomem.agent.react_loop import ReactResult
from nanomem.agent.replay import last_user, newest_first, open_pause, waiting
from nanomem.pools import CLIENT_SCHEMAS
from nanomem.providers import ToolCall
from nanomem.text.masking import redact, redact_message
from nanomem.tools import untrusted

if TYPE_CHECKING:
    from nanomem.agent.bus import InboundMessage
    from nanomem.agent.templates import Templates
    from nanomem.memory import Session, SessionStore

# The chat's lock and session lease, held around a timer's closing (AgentLoop.between_turns).
Hold = Callable[[str], AbstractAsyncContextManager[None]]


class ClientTurns:
    """The core's side of API clients' turns: a request checked against its session before
    anything is saved, a continuation's results saved, a turn run with the client's tools,
    instructions and options, and paused turns closed that nobody went on with."""

    def __init__(
        self, sessions: SessionStore, templates: Templates, hold: Hold, max_chars: int
    ) -> None:
        self.sessions, self.templates, self._hold = sessions, templates, hold
        self.max_chars = max_chars  # of one tool result, as of a message (agent.max_message_chars)
        self._timers: dict[str, asyncio.Task[None]] = {}
        # response_format goes to the model until it says it cannot; then into the prompt.
        self.native = True

    async def before(
        self, msg: InboundMessage, offered: Callable[[], set[str]]
    ) -> OutboundMessage | None:
        """Anything but None answers the message before anything of it is saved: a refusal of
        what the client asked. A paused turn the message does not go on with is closed."""
        session = await self.sessions.get(msg.session_key)
        messages, client = session.messages, msg.client
        if client is not None:
            problem = _refusal(client, messages, offered)
            carries = client.tools or client.instructions or client.results
            if carries and msg.sender.shared_room:
                problem = "a client's tools and instructions are not taken in a group chat"
            if problem is None and (form := client.options.response_format) is not None:
                problem = await CLIENT_SCHEMAS.run(structured.refused, form)  # time-bounded
            if problem is not None:
                return refusal(msg, problem)
            if client.results:
                problem = await self._unfit(msg, session)
                return refusal(msg, problem) if problem is not None else None
        pause = open_pause(messages)
        if pause is None:
            return None
        user = last_user(messages)
        again = msg.replayed and user is not None and messages[user].get("in") == msg.id
        expired = _expired(messages[pause])
        if not again or expired:
            await self.close(session, pause, expired=expired)  # or the client moved on
        elif msg.session_key not in self._timers:  # a retry after a restart
            self._arm(msg.session_key, messages[pause])
        return None

    async def _unfit(self, msg: InboundMessage, session: Session) -> str | None:
        """Why a continuation's results do not fit the session's paused turn (None: they do,
        or a retried request's results were saved already)."""
        assert msg.client is not None
        messages, ids = session.messages, [r.call_id for r in msg.client.results]
        if (twice := _twice(ids)) is not None:
            return f"two results for the tool call {twice!r}"
        for result in msg.client.results:
            if len(result.content) > self.max_chars:
                size = f"{len(result.content)} characters; limit {self.max_chars}"
                return f"the result of the tool call {result.call_id!r} is too long ({size})"
        if msg.replayed and _saved_from(messages, msg.id):
            return None  # a retry: the turn's outcome is answered (AgentLoop._stoppable_turn)
        given = _results(messages, ids)
        pause = open_pause(messages)
        pending = waiting(messages, pause) if pause is not None else []
        if pause is not None and _expired(messages[pause]):
            await self.close(session, pause)
            pause, pending, given = None, [], _results(messages, ids)
        for call_id in ids:
            if call_id in pending:
                continue
            if given.get(call_id, {}).get("closed"):
                return f"the tool call {call_id!r} was closed: its result came too late"
            if pause is not None and call_id in _call_names(messages[pause]):
                return f"the tool call {call_id!r} is not a call of your tools"
            return f"no tool call {call_id!r} waits for a result in this session"
        missing = [call_id for call_id in pending if call_id not in ids]
        return f"no result for the tool call {missing[0]!r}" if missing else None

    async def go_on(self, msg: InboundMessage, session: Session) -> tuple[Session, int | None]:
        """A continuation's results saved (unless a retry's were already); the paused turn's
        user message, where the turn goes on from."""
        assert msg.client is not None
        messages = session.messages
        pause = open_pause(messages)
        pending = waiting(messages, pause) if pause is not None else []
        saved = msg.replayed and _saved_from(messages, msg.id)
        if (
            pause is not None
            and not saved
            and all(r.call_id in pending for r in msg.client.results)
        ):
            names = _call_names(messages[pause])
            results = [
                {
                    "role": "tool",
                    "tool_call_id": result.call_id,
                    "name": names[result.call_id],
                    # Text from the client's program, maybe from a page it read: data for
                    # the model, like an MCP server's answer, never the owner's instructions.
                    "content": untrusted(
                        f"the API client's tool {names[result.call_id]}", result.content
                    ),
                    "client": True,
                    "in": msg.id,  # how a retry of this request finds them (not by call id)
                }
                for result in msg.client.results
            ]
            await self.sessions.append(session, results)
            self._disarm(session.key)
        return session, last_user(messages)

    def paused(self, session: Session, at: int) -> Paused | None:
        """The calls the turn that began at `at` still waits for, if it is paused."""
        pause = open_pause(session.messages)
        if pause is None or pause < at:
            return None
        return _paused(session.messages[pause], waiting(session.messages, pause))

    def run_for(self, msg: InboundMessage) -> ClientRun | None:
        """What a client's request adds to its turn's model calls (None: nothing)."""
        if msg.client is None:
            return None
        return ClientRun(msg.client, self)

    def outcome(
        self, msg: InboundMessage, run: ClientRun, result: ReactResult
    ) -> Paused | Text | None:
        """The answer when the turn paused or its answer missed the asked form; None: the
        loop answers as for any turn."""
        if result.pending:
            last = next(m for m in reversed(result.messages) if m.get("role") == "assistant")
            self._arm(msg.session_key, last)
            return _paused(redact_message(last))  # as saved: no known secret in it
        if run.unmet is not None:
            reason = redact(f"the answer does not fit response_format: {run.unmet}")
            return Text(reason, "error", category=SCHEMA_UNMET)
        return None

    async def close(self, session: Session, pause: int, *, expired: bool = True) -> None:
        """Every call the paused turn at `pause` waits for gets a result saying none came:
        its time was up (`expired`), or the client went on with a new message."""
        names = _call_names(session.messages[pause])
        note = self.templates.render("client_tool_closed.md.j2", expired=expired)
        closed = [
            {
                "role": "tool",
                "tool_call_id": call_id,
                "name": names[call_id],
                "content": note,
                "client": True,
                "closed": True,
            }
            for call_id in waiting(session.messages, pause)
        ]
        await self.sessions.append(session, closed)
        self._disarm(session.key)

    def _arm(self, key: str, message: dict[str, Any]) -> None:
        self._disarm(key)
        self._timers[key] = asyncio.ensure_future(self._expire(key, message))

    def _disarm(self, key: str) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None and timer is not asyncio.current_task():
            timer.cancel()

    async def _expire(self, key: str, message: dict[str, Any]) -> None:
        """Close the paused turn whose assistant message is `message` when its time is up,
        if it is still the session's paused turn then."""
        await asyncio.sleep(max(0.0, float(message["until"]) - time.time()))
        try:
            async with self._hold(key):
                self._disarm(key)  # this timer's own entry: never cancels itself
                session = await self.sessions.get(key)
                pause = open_pause(session.messages)
                if pause is not None and session.messages[pause]["waits"] == message["waits"]:
                    await self.close(session, pause)
        except Exception:
            from loguru import logger

            logger.exception("a paused turn of {} could not be closed", key)

    async def stop(self) -> None:
        """Forget the timers (a paused turn's `until` is on disk: the next start closes it)."""
        timers = list(self._timers.values())
        self._timers.clear()
        for timer in timers:
            timer.cancel()
        if timers:
            await asyncio.wait(timers, timeout=2.0)


def refusal(msg: InboundMessage, problem: str) -> OutboundMessage:
    return OutboundMessage.answering(msg, Text(problem, "error", category=CLIENT_REQUEST))


def _refusal(
    client: ClientTurn, messages: list[dict[str, Any]], offered: Callable[[], set[str]]
) -> str | None:
    """What makes the request impossible whatever the paused turn (None: nothing), but for
    its response_format (structured.refused, in a pool's thread)."""
    if client.tools:
        names = {tool["function"]["name"] for tool in client.tools}
        if clash := sorted(names & offered()):
            return f"tools: {', '.join(clash)} {'is' if len(clash) == 1 else 'are'} nanomem's own"
    if client.follows and not _answered(messages, client.follows):
        return f"previous_response_id {client.follows!r} is not an answer in this session"
    return None


def _answered(messages: list[dict[str, Any]], reply_id: str) -> bool:
    """Whether an answer with this Responses API id is among the session's last messages."""
    return any(messages[i].get("reply_id") == reply_id for i in newest_first(messages))


def _client_results(messages: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The client's results (and closing notes) in the session's last turn, newest first."""
    for index in newest_first(messages):
        message = messages[index]
        if message.get("role") == "user":
            return
        if message.get("client"):
            yield message


def _results(messages: list[dict[str, Any]], ids: list[str]) -> dict[str, dict[str, Any]]:
    """The client's results (or closing notes) for these ids in the session's last turn."""
    wanted, found = set(ids), {}
    for message in _client_results(messages):
        if message.get("tool_call_id") in wanted:
            found[message["tool_call_id"]] = message
    return found


def _saved_from(messages: list[dict[str, Any]], request: str) -> bool:
    """Whether this request's results were saved in the session's last turn: call ids do not
    tell (a model server without ids names every step's first call "call_0")."""
    return any(message.get("in") == request for message in _client_results(messages))


def _twice(ids: list[str]) -> str | None:
    """The first id given twice (in one pass: a request may carry any number of results)."""
    seen: set[str] = set()
    for call_id in ids:
        if call_id in seen:
            return call_id
        seen.add(call_id)
    return None


def _paused(message: dict[str, Any], pending: list[str] | None = None) -> Paused:
    """The answer of a paused turn from its assistant message: the calls it waits for."""
    waits = message["waits"] if pending is None else pending
    calls = tuple(
        ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"])
        for c in message["tool_calls"]
        if c["id"] in waits
    )
    return Paused(str(message.get("content") or ""), calls)


def _call_names(message: dict[str, Any]) -> dict[str, str]:
    return {call["id"]: call["function"]["name"] for call in message.get("tool_calls") or ()}


def _expired(message: dict[str, Any]) -> bool:
    return float(message.get("until") or 0) <= time.time()
