"""A hostile history search: 10 KB of `a* ` terms, through the real agent loop."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from nanomem.agent.bus import InboundMessage
from nanomem.agent.outbound import OutboundMessage, Progress
from nanomem.audience import Sender
from nanomem.home import Home
from nanomem.memory.history import HistoryEntry
from nanomem.providers.provider import Reply
from nanomem.providers.scripted import ScriptedProvider, call, text
from tests.conftest import cli_env, make_app, run_cli_here

HOSTILE = "a* " * 3414  # 10 KB: took 47 s over 20,000 entries, holding the index meanwhile


def fill_history(path: Path, entries: int) -> None:
    """An archive of `entries` summaries, written as the Consolidator writes them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for cursor in range(1, entries + 1):
            content = f"- day {cursor}: about an apple, a walk and a nap; entry {cursor}"
            if cursor % 997 == 0:
                content += "; the notebook is in the attic"
            stamp = f"2026-{1 + cursor % 12:02d}-01T10:00:00+00:00"
            fh.write(HistoryEntry(cursor, stamp, "cli:old", content, "summary").to_json() + "\n")


def searcher(messages: list[dict[str, Any]]) -> Reply:
    """A model that searches for what it is asked, then says what the search returned."""
    last = messages[-1]
    if last["role"] == "tool":
        return text(f"found: {last['content']}")
    query = HOSTILE if last["content"].endswith("hunt") else "attic notebook"
    return call("search_history", {"query": query})


@pytest.mark.slow  # 20,000 entries indexed
async def test_a_10_kb_query_is_bounded_and_holds_up_no_other_chat(home: Home) -> None:
    app = make_app(home, ScriptedProvider([searcher] * 4))
    fill_history(app.history.path, 20_000)
    searching = asyncio.Event()

    async def progress(out: OutboundMessage) -> None:
        if isinstance(out.part, Progress) and out.content.startswith("search_history"):
            searching.set()

    hunt = InboundMessage("cli", "a", "hunt", Sender("user"))
    hostile = asyncio.create_task(app.loop.handle(hunt, progress=progress))
    await asyncio.wait_for(searching.wait(), 60)
    # Another chat, asking while the hostile search runs, is answered.
    ask = InboundMessage("cli", "b", "where is the notebook?", Sender("user"))
    other = await asyncio.wait_for(app.loop.handle(ask), 30)
    assert other is not None and other.content.startswith("found: [")
    assert "the notebook is in the attic" in other.content
    answer = await asyncio.wait_for(hostile, 30)
    assert answer is not None
    # The cuts are said, and the search ran on what was left of it: the word "a".
    assert "The query was cut to its first 512 characters." in answer.content
    assert "A prefix needs at least 3 letters: a* searched as whole words." in answer.content
    assert answer.content.count("(cli:old) #") == 10


def test_why_with_10_kb_of_words_is_cut_and_answers(home: Home) -> None:
    memory = home.workspace / "memory" / "MEMORY.md"
    facts = "".join(f"- fact {i}: likes apples and walks in the park\n" for i in range(600))
    memory.write_text(memory.read_text() + facts)
    result = run_cli_here("memory", "why", *("apple walk " * 900).split(), env=cli_env(home))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(
        "(Only the first 512 characters of the words were looked for.)\n"
    )
