"""The Consolidator with a model double that summarises by listing the facts it was shown."""

import asyncio
import re
from typing import Any

import pytest

from nanomem.agent.bus import InboundMessage
from nanomem.app import App
from nanomem.audience import Sender
from nanomem.features.consolidation import Consolidator
from nanomem.home import Home
from nanomem.memory.history import NewEntry
from nanomem.memory.session import Session, to_wire
from nanomem.providers.provider import ProviderError, Reply, ToolCall, Usage
from tests.conftest import make_app
from tests.helpers import until

WINDOW = {"llm": {"context_window_tokens": 8192, "max_tokens": 256}}
SUMMARY_MARK = "from nanomem, not from the person"


class Model:
    """Chat replies are long; summary requests get one line per 'fact number N' seen."""

    def __init__(self) -> None:
        self.calls: list[list[dict[str, Any]]] = []
        self.summary_failure: ProviderError | None = None
        self.summary_text: str | None = None
        self.prompt_tokens: int | None = None
        self.tool_choices: list[str | None] = []

    async def complete(
        self, messages, tools=None, *, max_tokens=None, tool_choice=None, on_text=None, **_
    ) -> Reply:  # type: ignore[no-untyped-def]
        self.calls.append(messages)
        self.tool_choices.append(tool_choice)
        last = str(messages[-1].get("content"))
        if SUMMARY_MARK in last:
            if self.summary_failure is not None:
                raise self.summary_failure
            if self.summary_text is not None:
                return Reply(self.summary_text)
            seen = " ".join(str(m.get("content")) for m in messages[1:-1])
            facts = sorted(set(re.findall(r"fact number \d+", seen)))
            return Reply("\n".join(f"- 2026-11-22: the user told me {f}" for f in facts))
        usage = Usage(self.prompt_tokens, 50) if self.prompt_tokens else None
        return Reply("Noted. " + "This is a long and thoughtful reply. " * 12, usage=usage)

    def chat_calls(self) -> list[list[dict[str, Any]]]:
        return [c for c in self.calls if SUMMARY_MARK not in str(c[-1].get("content"))]


def app_with(home: Home, model: Model, **sections: dict[str, object]) -> App:
    merged = {**WINDOW, **sections}
    return make_app(home, model, **merged)  # type: ignore[arg-type]


async def talk(app: App, turns: int, start: int = 0, chat: str = "direct") -> None:
    for i in range(start, start + turns):
        text = f"Please remember fact number {i}: " + "some detail " * 25
        await app.loop.handle(InboundMessage("cli", chat, text, Sender("u")))
        await app.loop.close(grace_s=30)  # let the background consolidation finish


def prompt_size(app: App, messages: list[dict[str, Any]]) -> int:
    return sum(app.budget.count(m) for m in messages) + app.budget.count_tools(
        app.tools.schema_text
    )


async def test_a_long_conversation_stays_inside_the_budget(home: Home) -> None:
    model = Model()
    app = app_with(home, model)
    await talk(app, 40)
    limit = app.budget.prompt_limit
    sizes = [prompt_size(app, call) for call in model.chat_calls()]
    assert max(sizes) <= limit, (max(sizes), limit)
    assert max(sizes[20:]) <= app.budget.trigger * 1.15  # consolidation starts before the limit
    session = await app.sessions.get("cli:direct")
    assert session.replay_from > 0
    assert len(session.messages) == 80  # the transcript keeps every message
    archive = "\n".join(e.content for e in app.history.iter_backwards())
    assert "fact number 0" in archive and "fact number 10" in archive
    cursors = [e.cursor for e in app.history.iter_backwards()][::-1]
    assert cursors == list(range(1, len(cursors) + 1))


async def test_boundaries_are_user_turns_and_recent_turns_stay_raw(home: Home) -> None:
    model = Model()
    app = app_with(home, model, memory={"keep_recent_turns": 3})
    await talk(app, 30)
    session = await app.sessions.get("cli:direct")
    assert session.messages[session.replay_from]["role"] == "user"
    assert len(session.user_turn_starts()) >= 3
    sent = to_wire(session.messages[session.replay_from :])
    assert len(sent) == len(session.messages) - session.replay_from  # nothing orphaned


async def test_tool_calls_are_never_split_from_their_results(home: Home) -> None:
    model = Model()
    app = app_with(home, model)
    calls = 0

    async def with_tools(  # type: ignore[no-untyped-def]
        messages, tools=None, *, max_tokens=None, tool_choice=None, on_text=None, **_
    ):
        nonlocal calls
        calls += 1
        last = messages[-1]
        if SUMMARY_MARK not in str(last.get("content")) and last["role"] == "user":
            return Reply(None, (ToolCall(f"c{calls}", "list_dir", '{"path": "memory"}'),))
        return await Model.complete(
            model, messages, tools, max_tokens=max_tokens, tool_choice=tool_choice
        )

    model.complete = with_tools  # type: ignore[method-assign]
    await talk(app, 30)
    session = await app.sessions.get("cli:direct")
    assert session.replay_from > 0
    assert session.messages[session.replay_from]["role"] == "user"
    assert session.messages[session.replay_from - 1]["role"] == "assistant"


async def test_failed_summaries_fall_back_to_complete_raw_entries(home: Home) -> None:
    model = Model()
    model.summary_failure = ProviderError("server", "down")
    # A window whose archived batches outgrow one raw entry (whatever the tools' schemas take).
    app = app_with(home, model, llm={"context_window_tokens": 10000, "max_tokens": 256})
    await talk(app, 30)
    session = await app.sessions.get("cli:direct")
    assert session.replay_from > 0
    entries = list(app.history.iter_backwards())[::-1]
    assert entries and {e.kind for e in entries} == {"raw"}
    assert all(len(e.content) <= 4000 for e in entries)
    archived = "\n".join(e.content for e in entries)
    for message in session.messages[: session.replay_from]:
        if message["role"] == "user":
            body = message["content"].split("\n\n", 1)[1]
            assert body in archived  # every word the person said is kept, nothing cut
    assert any(e.parts > 1 for e in entries)


async def test_unusable_summaries_are_retried_then_archived_raw(home: Home) -> None:
    model = Model()
    model.summary_text = "   "
    app = app_with(home, model)
    await talk(app, 30)
    summary_calls = len(model.calls) - len(model.chat_calls())
    assert summary_calls >= 2
    assert {e.kind for e in app.history.iter_backwards()} == {"raw"}


async def test_summary_requests_offer_the_tools_but_forbid_calling_them(home: Home) -> None:
    model = Model()
    app = app_with(home, model)
    await talk(app, 3)
    await app.loop.handle(InboundMessage("cli", "direct", "/new"))
    kinds = [
        (SUMMARY_MARK in str(call[-1].get("content")), choice)
        for call, choice in zip(model.calls, model.tool_choices, strict=True)
    ]
    assert kinds == [(False, None)] * 3 + [(True, "none")]


@pytest.mark.parametrize("answer", ["NOTHING", "nothing.", "- NOTHING"])
async def test_a_nothing_new_summary_archives_no_entry_but_moves_the_replay_start(
    home: Home, answer: str
) -> None:
    model = Model()
    model.summary_text = answer
    app = app_with(home, model)
    await talk(app, 30)
    session = await app.sessions.get("cli:direct")
    assert session.replay_from > 0
    assert session.state.get("consolidating") is None
    assert list(app.history.iter_backwards()) == []
    summary_calls = len(model.calls) - len(model.chat_calls())
    consolidations = sum(1 for line in session.path.read_text().splitlines() if '"to"' in line)
    assert summary_calls == consolidations  # one request each: NOTHING is an answer, not a failure


async def test_session_locks_are_not_kept_once_passes_end(home: Home) -> None:
    app = app_with(home, Model())
    for chat in range(5):
        await talk(app, 30 if chat == 0 else 1, chat=str(chat))
    assert app.history.last_cursor() > 0  # chat 0 consolidated
    assert len(app.feature(Consolidator)._locks) == 0


async def test_history_reaches_the_next_system_prompt(home: Home) -> None:
    model = Model()
    app = app_with(home, model)
    await talk(app, 30)
    system = model.chat_calls()[-1][0]["content"]
    assert "Recent history of this chat" in system
    assert "the user told me fact number 0" in system
    other = await app.context.system_prompt("telegram:1", False)
    assert "fact number 0" not in other  # one chat's history never leaks into another's


async def test_new_archives_first_then_starts_fresh(home: Home) -> None:
    model = Model()
    app = app_with(home, model)
    await talk(app, 3)
    reply = await app.loop.handle(InboundMessage("cli", "direct", "/new"))
    assert reply is not None
    assert reply.content == (
        "New session started.\nArchived 6 messages to memory/history.jsonl as a summary."
    )
    assert "fact number 2" in next(app.history.iter_backwards()).content
    again = await app.loop.handle(InboundMessage("cli", "direct", "/new"))
    assert again is not None and again.content == "New session started."
    await app.loop.handle(InboundMessage("cli", "direct", "hello again"))
    assert [m["role"] for m in model.chat_calls()[-1]] == ["system", "user"]


async def test_an_interrupted_consolidation_without_entries_is_redone_once(home: Home) -> None:
    model = Model()
    app = app_with(home, model)
    await talk(app, 3)
    session = await app.sessions.get("cli:direct")
    journal = {"ref": "dead", "from": 0, "to": 4, "after": app.history.last_cursor()}
    await app.sessions.update_state(session, consolidating=journal)  # then the process died
    fresh = app_with(home, model)
    reply = await fresh.loop.handle(InboundMessage("cli", "direct", "/new"))
    assert reply is not None and "Archived 6 messages" in reply.content
    assert len(list(fresh.history.iter_backwards())) == 1


async def test_an_interrupted_consolidation_with_its_summary_is_completed(home: Home) -> None:
    model = Model()
    app = app_with(home, model)
    await talk(app, 3)
    session = await app.sessions.get("cli:direct")
    journal = {"ref": "abc", "from": 0, "to": 4, "after": app.history.last_cursor()}
    await app.sessions.update_state(session, consolidating=journal)
    await app.history.append([NewEntry("cli:direct", "- fact number 0 and 1", "summary", "abc")])
    fresh = app_with(home, model)  # restart: the boundary did not move before the crash
    reply = await fresh.loop.handle(InboundMessage("cli", "direct", "/new"))
    assert reply is not None and "Archived 2 messages" in reply.content
    contents = [e.content for e in fresh.history.iter_backwards()]
    assert len(contents) == 2 and "fact number 0" not in contents[0]


async def test_interrupted_raw_archive_gets_exactly_its_missing_parts(home: Home) -> None:
    from nanomem.features.consolidation.consolidator import raw_entries

    model = Model()
    app = app_with(home, model)
    await talk(app, 6)
    session = await app.sessions.get("cli:direct")
    parts = raw_entries("cli:direct", session.messages[0:10], "rawref", False)
    assert len(parts) >= 2
    journal = {"ref": "rawref", "from": 0, "to": 10, "after": app.history.last_cursor()}
    await app.sessions.update_state(session, consolidating=journal)
    await app.history.append(parts[:1])  # only the first part reached the disk
    fresh = app_with(home, model)
    fresh_session = await fresh.sessions.get("cli:direct")
    await fresh.feature(Consolidator).recover(fresh_session)
    assert fresh_session.replay_from == 10 and not fresh_session.state.get("consolidating")
    written = [e for e in fresh.history.iter_backwards() if e.ref == "rawref"]
    assert sorted(e.part for e in written) == list(range(1, len(parts) + 1))


async def test_usage_calibrates_the_estimate(home: Home) -> None:
    model = Model()
    app = app_with(home, model)
    before = app.budget.calibration.factor
    model.prompt_tokens = 6000  # the provider counts far more than our tokenizer
    await talk(app, 2)
    assert app.budget.calibration.factor > before + 0.3


class HeldModel(Model):
    """Summary requests wait at a gate, so a consolidation can be caught half-way."""

    def __init__(self) -> None:
        super().__init__()
        self.summarising = asyncio.Event()
        self.gate = asyncio.Event()

    async def complete(
        self, messages, tools=None, *, max_tokens=None, tool_choice=None, on_text=None, **_
    ) -> Reply:  # type: ignore[no-untyped-def]
        if SUMMARY_MARK in str(messages[-1].get("content")):
            self.summarising.set()
            await self.gate.wait()
        return await super().complete(
            messages, tools, max_tokens=max_tokens, tool_choice=tool_choice
        )


def facts(text: str) -> set[str]:
    return set(re.findall(r"fact number \d+", text))


def fact_turns(count: int) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    for i in range(count):
        turns += [
            {"role": "user", "content": f"Please remember fact number {i}: " + "detail " * 30},
            {"role": "assistant", "content": "Noted. " + "A long reply. " * 20},
        ]
    return turns


def waited_for(app: App, session: Session) -> bool:
    """Something (a turn, a recovery) waits for the consolidation that holds the session."""
    lock = app.feature(Consolidator)._lock(session)
    return bool(lock._waiters)  # asyncio.Lock's queue of waiters


async def test_a_turn_shows_what_a_consolidation_archived_while_it_waited(home: Home) -> None:
    model = HeldModel()
    app = app_with(home, model)
    session = await app.sessions.get("cli:direct")
    await app.sessions.append(session, fact_turns(30))
    # As after a turn:
    archiving = asyncio.create_task(app.feature(Consolidator).consolidate(session))
    await model.summarising.wait()
    question = InboundMessage("cli", "direct", "And fact number 30?", Sender("u"))
    turn = asyncio.create_task(app.loop.handle(question))
    await until(lambda: waited_for(app, session))  # the turn waits for the archive to finish
    model.gate.set()
    assert await archiving and await turn is not None
    sent = model.chat_calls()[-1]
    shown = facts(sent[0]["content"]) | facts(" ".join(str(m["content"]) for m in sent[1:]))
    assert shown == {f"fact number {i}" for i in range(31)}


async def test_recovery_behind_a_running_consolidation_never_moves_back(home: Home) -> None:
    model = HeldModel()
    app = app_with(home, model)
    session = await app.sessions.get("cli:direct")
    await app.sessions.append(session, fact_turns(60))  # far over: archiving takes rounds
    archiving = asyncio.create_task(app.feature(Consolidator).consolidate(session))
    await model.summarising.wait()  # round one is journalled and under way
    recovering = asyncio.create_task(app.feature(Consolidator).recover(session))
    await until(lambda: waited_for(app, session))  # the recovery waits behind the round
    model.gate.set()
    rounds = await archiving
    await recovering
    assert len(rounds) >= 2
    archived = facts("\n".join(e.content for e in app.history.iter_backwards()))
    replayed = facts(" ".join(str(m["content"]) for m in session.messages[session.replay_from :]))
    assert archived and replayed and not archived & replayed
