"""The Consolidator keeps each session inside its token budget by summarising the oldest
safe slice into memory/history.jsonl. Every step is journalled in the session file, so a
crash at any point neither loses nor duplicates what was said."""

from __future__ import annotations

import asyncio
import uuid
import weakref
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from loguru import logger

from nanomem.agent import ContextBuilder, Feature, Templates, react
from nanomem.memory import (
    Budget,
    HistoryEntry,
    HistoryStore,
    NewEntry,
    Session,
    SessionStore,
    to_wire,
)
from nanomem.providers import Provider, ProviderError, charged_to
from nanomem.text.plural import plural
from nanomem.tools import OUTSIDE, ToolContext, ToolOutput, ToolRegistry

RAW_ENTRY_CHARS = 4000
SUMMARY_ATTEMPTS = 2
NOTHING = "NOTHING"  # the whole answer of a summary with nothing worth keeping


class SummaryFailed(Exception):
    pass


@dataclass(frozen=True)
class Archived:
    messages: int
    entries: list[HistoryEntry]

    def describe(self) -> str:
        if not self.entries:
            them = "it" if self.messages == 1 else "them"
            return f"Archived {plural(self.messages, 'message')}; nothing in {them} needed keeping."
        kinds = {e.kind for e in self.entries}
        how = (
            "as a summary"
            if kinds == {"summary"}
            else f"as {plural(len(self.entries), 'raw entry', 'raw entries')}"
        )
        return f"Archived {plural(self.messages, 'message')} to memory/history.jsonl {how}."


class _NoToolsNow(ToolRegistry):
    """Offers the chat's tool schemas (same prompt prefix, so the provider's cache serves the
    summary request) but never runs a tool."""

    def __init__(self, schemas: list[dict[str, Any]]) -> None:
        super().__init__()
        self._offered = schemas

    def schemas(self, context: ToolContext | None = None) -> list[dict[str, Any]]:
        return self._offered

    async def run(self, name: str, raw_arguments: str, context: ToolContext) -> ToolOutput:
        return ToolOutput("Error: tools are not available while summarising.")


class Consolidator(Feature):
    """A feature of hooks only: before a turn (when its prompt would not fit), after it (in the
    background, early), and before /new (what was said is archived, never dropped)."""

    name = "consolidation"

    def __init__(
        self,
        *,
        sessions: SessionStore,
        history: HistoryStore,
        provider: Provider,
        context: ContextBuilder,
        templates: Templates,
        budget: Budget,
        tools: ToolRegistry,
        keep_recent_turns: int,
        max_rounds: int,
    ) -> None:
        self.sessions, self.history, self.provider = sessions, history, provider
        self.context, self.templates, self.budget = context, templates, budget
        self.chat_tools = tools  # offered, never run: see _NoToolsNow
        self.keep_recent_turns = keep_recent_turns
        self.max_rounds = max_rounds
        # Weak: a session's lock lives while a pass holds or awaits it, then goes.
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    # -- hooks for the AgentLoop ----------------------------------------------------------

    async def before_turn(self, session: Session, context: ToolContext) -> None:
        """Block the turn only when its prompt would not fit; otherwise stay out of the way."""
        await self.recover(session)
        # The new message is already saved in the session, so the estimate includes it.
        if await self.estimate(session, fresh=False) > self.budget.prompt_limit:
            await self.consolidate(session)

    async def after_turn(self, session: Session, context: ToolContext) -> None:
        """Runs in the background: start early, so no turn has to wait later."""
        if self._lock(session).locked():
            return
        async with self.sessions.lease(session.key):
            # The turn's lease may have ended first, and another process may have written to
            # the session before ours was taken: work on the session as the file has it now.
            session = await self.sessions.get(session.key)
            if await self.estimate(session, fresh=False) > self.budget.trigger:
                await self.consolidate(session)

    async def before_new(self, session: Session, context: ToolContext) -> str | None:
        await self.recover(session)
        async with self.sessions.lease(session.key), self._lock(session):
            end = len(session.messages)
            if end <= session.replay_from:
                return None
            return (await self._archive(session, session.replay_from, end)).describe()

    # -- consolidation --------------------------------------------------------------------

    async def estimate(self, session: Session, *, fresh: bool = True) -> int:
        """The next prompt's size: system prompt, tools, and what the model still sees.

        Not `fresh`: the system prompt's size from the chat's last turn, which is what the
        quick checks around every turn need (building the prompt again costs a file scan)."""
        while True:  # twice at most: byte bounds near the trigger are counted again, exactly
            system_tokens = session.system_tokens
            if fresh or system_tokens is None:
                system_prompt = await self.context.system_prompt(session.key, session.is_room)
                system_tokens = self.budget.count_system(system_prompt)
            raw = (
                system_tokens
                + self.budget.count_tools(self.chat_tools.schema_text)
                + session.unconsolidated_tokens()
            )
            estimate = self.budget.calibration.apply(raw)
            if self.budget.settled(estimate):
                return estimate

    async def consolidate(self, session: Session) -> list[Archived]:
        """Summarise the oldest turns until the estimate is under the target (bounded rounds)."""
        done: list[Archived] = []
        async with self._lock(session):
            for _ in range(self.max_rounds):
                excess = await self.estimate(session) - self.budget.target
                if excess <= 0:
                    break
                end = self._boundary(session, excess)
                if end is None:
                    break
                done.append(await self._archive(session, session.replay_from, end))
        return done

    def _boundary(self, session: Session, excess: int) -> int | None:
        """A user-turn start that frees `excess` tokens (or as many as allowed), keeping the
        last turns raw and the chunk small enough to summarise in one request."""
        starts = session.user_turn_starts()
        kept_raw = max(0, len(starts) - self.keep_recent_turns)
        allowed = [i for i in starts[:kept_raw] if i > session.replay_from]
        if not allowed:
            return None
        chunk_cap = self.budget.prompt_limit // 2
        chosen = None
        for boundary in allowed:
            freed = session.tokens_between(session.replay_from, boundary)
            if chosen is not None and freed > chunk_cap:
                break
            chosen = boundary
            # A quarter more than the excess: the summary itself comes back into the prompt.
            if freed * self.budget.calibration.factor >= excess * 1.25:
                break
        return chosen

    async def _archive(self, session: Session, start: int, end: int) -> Archived:
        ref = uuid.uuid4().hex[:16]
        journal = {"ref": ref, "from": start, "to": end, "after": self.history.last_cursor()}
        await self.sessions.update_state(session, consolidating=journal)
        try:
            summary = await self._summarise(session, start, end)
            # Nothing worth keeping: no entry, but the slice still counts as consolidated. A
            # crash before the state update finds no entry for the journal and redoes the
            # slice, which is just as right.
            room = session.is_room
            entries = [NewEntry(session.key, summary, "summary", ref, room=room)] if summary else []
        except SummaryFailed as exc:
            logger.warning("consolidation of {} fell back to raw entries: {}", session.key, exc)
            entries = raw_entries(session.key, session.messages[start:end], ref, session.is_room)
        written = await self.history.append(entries) if entries else []
        await self.sessions.update_state(session, replay_from=end, consolidating=None)
        logger.info(
            "consolidated {} of {} into {}",
            plural(end - start, "message"),
            session.key,
            plural(len(written), "entry", "entries"),
        )
        return Archived(end - start, written)

    async def _summarise(self, session: Session, start: int, end: int) -> str:
        """The summary of messages[start:end]; "" when the model says nothing is worth keeping."""
        chunk = session.messages[start:end]
        system = await self.context.system_prompt(session.key, session.is_room)
        instruction = self.templates.render(
            "consolidate.md.j2", first=_day(chunk[0]), last=_day(chunk[-1]), today=_day({})
        )
        prompt = [
            {"role": "system", "content": system},
            *to_wire(chunk),
            {"role": "user", "content": instruction},
        ]
        problem = "no attempt"
        for _ in range(SUMMARY_ATTEMPTS):
            try:
                # The tools stay offered (same prompt prefix for the cache) but may not be used.
                with charged_to(session.key, "consolidation"):
                    result = await react(
                        self.provider,
                        prompt,
                        _NoToolsNow(self.chat_tools.schemas()),
                        1,
                        context=OUTSIDE,
                        tool_choice="none",
                    )
            except ProviderError as exc:
                problem = str(exc)
                if not exc.retryable:
                    break
                continue
            text = (result.text or "").strip()
            if says_nothing_new(text):
                return ""
            if usable(text):
                return text
            problem = "the model's summary was empty or unusable"
        raise SummaryFailed(problem)

    # -- crash recovery -------------------------------------------------------------------

    async def recover(self, session: Session) -> None:
        """Finish or undo a consolidation that a crash interrupted (journalled in the session)."""
        if not session.state.get("consolidating"):
            return
        async with self.sessions.lease(session.key), self._lock(session):
            # Read again under the lock: a consolidation running meanwhile may have finished
            # this round (and journalled others); acting on a stale journal would move the
            # replay start back.
            journal = session.state.get("consolidating")
            if not journal:
                return
            after, ref = int(journal["after"]), journal["ref"]
            found = await asyncio.to_thread(
                lambda: [e for e in self.history.iter_backwards(after) if e.ref == ref]
            )
            if not found:
                await self.sessions.update_state(session, consolidating=None)
                logger.warning(
                    "{}: an interrupted consolidation left nothing; redoing it later", session.key
                )
                return
            if found[0].kind == "raw" and len(found) < found[0].parts:
                have = {e.part for e in found}
                chunk = session.messages[int(journal["from"]) : int(journal["to"])]
                missing = [
                    e
                    for e in raw_entries(session.key, chunk, journal["ref"], session.is_room)
                    if e.part not in have
                ]
                await self.history.append(missing)
            await self.sessions.update_state(
                session, replay_from=int(journal["to"]), consolidating=None
            )
            logger.warning("{}: completed a consolidation interrupted by a crash", session.key)

    def _lock(self, session: Session) -> asyncio.Lock:
        return self._locks.setdefault(session.key, asyncio.Lock())


def says_nothing_new(text: str) -> bool:
    """The answer consolidate.md.j2 asks for when nothing is worth keeping: NOTHING, alone
    (a bullet, quotes or a full stop around it are tolerated)."""
    return text.strip().strip(" -*•`'\".").upper() == NOTHING


def usable(text: str) -> bool:
    """At least one line that says something; refusals and empty echoes are not summaries."""
    lines = [line for line in text.splitlines() if len(line.strip(" -*•")) >= 3]
    return bool(lines) and not text.lower().startswith(("i can't", "i cannot", "sorry"))


def raw_entries(
    session: str, messages: list[dict[str, Any]], ref: str, room: bool
) -> list[NewEntry]:
    """The chunk verbatim, split into bounded entries: deterministic, so recovery can redo it."""
    lines: list[str] = []
    for message in messages:
        lines.extend(_transcript_lines(message))
    pieces: list[str] = []
    current = ""
    for line in lines:
        while len(line) > RAW_ENTRY_CHARS:
            if current:
                pieces.append(current)
                current = ""
            pieces.append(line[:RAW_ENTRY_CHARS])
            line = line[RAW_ENTRY_CHARS:]
        if current and len(current) + 1 + len(line) > RAW_ENTRY_CHARS:
            pieces.append(current)
            current = ""
        current = f"{current}\n{line}" if current else line
    if current:
        pieces.append(current)
    return [
        NewEntry(session, piece, "raw", ref, part, len(pieces), room=room)
        for part, piece in enumerate(pieces, start=1)
    ]


def _transcript_lines(message: dict[str, Any]) -> list[str]:
    stamp = str(message.get("ts", ""))[:16].replace("T", " ")
    role = message.get("role", "?")
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(p.get("text", "[image]") for p in content if isinstance(p, dict))
    text = str(content or "")
    if role == "user" and text.startswith("[runtime"):
        text = text.split("\n\n", 1)[-1]  # the runtime header is ours, the time is in `ts`
    lines = [f"[{stamp}] {role}: {text}"] if text else []
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        lines.append(f"[{stamp}] {role} → {function.get('name')}({function.get('arguments')})")
    if role == "tool":
        lines = [f"[{stamp}] tool {message.get('name', '')}: {text}"]
    return lines


def _day(message: dict[str, Any]) -> str:
    stamp = message.get("ts")
    if isinstance(stamp, str) and len(stamp) >= 10:
        return stamp[:10]
    return datetime.now().astimezone().strftime("%Y-%m-%d")
