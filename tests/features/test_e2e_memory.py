"""Consolidation end to end: real litellm over HTTP to the loopback model, the real CLI (in
this process; in a subprocess for SIGKILL in the middle of an archive, the slow tier)."""

import json
import os
import re
import signal
import subprocess
from typing import Any

import pytest

from nanomem.agent.bus import InboundMessage
from nanomem.app import build_app
from nanomem.audience import Sender
from nanomem.home import Home
from nanomem.memory.session import session_filename
from tests.conftest import NANOMEM, cli_env, run_cli, run_cli_here, settings_for
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.helpers import wait_until

SUMMARY_MARK = "from nanomem, not from the person"


def scripted_model(request: dict[str, Any]) -> Step:
    """Summaries list the facts seen; chat replies are long enough to fill the window."""
    messages = request["messages"]
    if SUMMARY_MARK in str(messages[-1]["content"]):
        seen = " ".join(str(m.get("content")) for m in messages[1:-1])
        facts = sorted(set(re.findall(r"fact number \d+", seen)))
        return Step.reply("\n".join(f"- 2026-11-22: the user said {f}" for f in facts))
    return Step.reply("Got it. " + "A careful, detailed answer follows here. " * 15)


def history_entries(home: Home) -> list[dict[str, Any]]:
    path = home.workspace / "memory" / "history.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_long_conversation_through_litellm_stays_under_budget(
    home: Home, fake_llm: FakeOpenAI
) -> None:
    fake_llm.set_fallback(scripted_model)
    settings = settings_for(
        home,
        llm={
            "api_base": fake_llm.base_url,
            "api_key": "sk-e2e",
            "context_window_tokens": 6144,
            "max_tokens": 256,
        },
    )
    app = build_app(settings, home)
    for i in range(36):
        text = f"Remember fact number {i}, it matters. " + "context " * 30
        reply = await app.loop.handle(InboundMessage("cli", "direct", text, Sender("u")))
        assert reply is not None and reply.part.style == "reply", reply
        await app.loop.close(grace_s=30)
    limit = app.budget.prompt_limit
    chat_requests = [r for r in fake_llm.requests if SUMMARY_MARK not in str(r["messages"][-1])]
    for request in chat_requests:
        size = sum(app.budget.count(m) for m in request["messages"])
        size += app.budget.count_tools(json.dumps(request["tools"]))
        assert size <= limit, (size, limit)
    entries = history_entries(home)
    assert [e["cursor"] for e in entries] == list(range(1, len(entries) + 1))
    assert (home.workspace / "memory" / ".cursor").read_text().strip() == str(len(entries))
    archive = "\n".join(e["content"] for e in entries)
    assert "fact number 0" in archive and "fact number 5" in archive
    assert all(e["session"] == "cli:direct" and e["kind"] == "summary" for e in entries)
    last_system = chat_requests[-1]["messages"][0]["content"]
    assert "Recent history of this chat" in last_system and "fact number" in last_system
    summary_requests = [r for r in fake_llm.requests if SUMMARY_MARK in str(r["messages"][-1])]
    first_summary, chat_before = summary_requests[0], chat_requests[0]
    assert first_summary["messages"][0] == chat_before["messages"][0]  # same cached prefix
    assert first_summary["tools"] == chat_before["tools"]


def test_new_and_search_history_through_the_cli(home: Home, fake_llm: FakeOpenAI) -> None:
    env = cli_env(home, fake_llm)
    fake_llm.set_fallback(scripted_model)
    for i in range(2):
        assert (
            run_cli_here(
                "chat", "-m", f"note fact number {i} about Pixel the cat", env=env
            ).returncode
            == 0
        )
    result = run_cli_here("chat", "-m", "/new", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "New session started.",
        "Archived 4 messages to memory/history.jsonl as a summary.",
    ]
    fake_llm.set_fallback(None)
    fake_llm.tool_call("search_history", {"query": "FACT NUMBER 1"})
    fake_llm.reply("You told me fact number 1.")
    answer = run_cli_here("chat", "-m", "what was the second fact?", env=env)
    assert answer.stdout.strip() == "You told me fact number 1."
    observation = fake_llm.requests[-1]["messages"][-1]
    assert observation["role"] == "tool" and "the user said fact number 1" in observation["content"]
    assert observation["content"].startswith("[")  # timestamp first


@pytest.mark.parametrize("moment", ["while summarising", "after the archive was written"])
def test_sigkill_during_new_loses_and_duplicates_nothing(
    home: Home, fake_llm: FakeOpenAI, moment: str
) -> None:
    env = cli_env(home, fake_llm)
    fake_llm.set_fallback(scripted_model)
    for i in range(3):
        run_cli("chat", "-m", f"fact number {i} is important", env=env)
    summary_text = "- 2026-11-22: the user said fact number 0, 1 and 2"
    if moment == "while summarising":
        fake_llm.reply(summary_text, latency=60)  # the process dies before this arrives
    process = subprocess.Popen(
        [*NANOMEM, "chat", "-m", "/new"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    history = home.workspace / "memory" / "history.jsonl"
    if moment == "while summarising":
        wait_until(lambda: len(fake_llm.requests) == 4, timeout=30)
    else:
        # Kill right after the entry is durable, before the session's boundary moves: the
        # journal in the session file must let the next run finish the job.
        wait_until(lambda: history.exists() and history.stat().st_size > 0, timeout=30)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    session_file = home.sessions / session_filename("cli:direct")
    lines = [json.loads(line) for line in session_file.read_text().splitlines()]  # all load
    assert sum(1 for line in lines if line.get("role") == "user") == 3

    fake_llm.clear()
    fake_llm.set_fallback(scripted_model)
    again = run_cli("chat", "-m", "/new", env=env)
    assert again.returncode == 0, again.stderr
    entries = history_entries(home)
    archive = "\n".join(e["content"] for e in entries)
    for i in range(3):
        assert f"fact number {i}" in archive
    assert len(entries) == 1, entries  # archived exactly once
    after = run_cli("chat", "-m", "/new", env=env)
    assert after.stdout.strip() == "New session started."
    final = [json.loads(line) for line in session_file.read_text().splitlines()]
    states = [line for line in final if line.get("_type") == "state"]
    assert states[-1].get("consolidating") is None


def tool_loving_model(request: dict[str, Any]) -> Step:
    """Answers a summary request with a tool call whenever it is allowed to (as some models
    do when tools are offered); with tool_choice "none" it writes the summary."""
    if SUMMARY_MARK in str(request["messages"][-1]["content"]):
        if request.get("tools") and request.get("tool_choice") != "none":
            return Step.tool_call("read_file", {"path": "USER.md"})
        return scripted_model(request)
    return Step.reply("Noted.")


@pytest.mark.parametrize("transport", ["litellm", "direct"])
def test_the_summary_request_forbids_tool_calls(
    home: Home, fake_llm: FakeOpenAI, transport: str
) -> None:
    env = cli_env(home, fake_llm, NANOMEM_LLM__TRANSPORT=transport)
    fake_llm.set_fallback(tool_loving_model)
    run_cli_here("chat", "-m", "fact number 7: my cat is called Pixel", env=env)
    result = run_cli_here("chat", "-m", "/new", env=env)
    assert result.returncode == 0, result.stderr
    summary_request = fake_llm.requests[-1]
    assert summary_request["tools"], "the chat's tools stay offered (prompt cache)"
    assert summary_request["tool_choice"] == "none"
    entries = history_entries(home)
    assert [e["kind"] for e in entries] == ["summary"]
    assert entries[0]["content"] == "- 2026-11-22: the user said fact number 7"
    chat_request = fake_llm.requests[0]
    assert "tool_choice" not in chat_request  # chat turns keep the provider's default


def test_a_nothing_new_summary_archives_nothing_and_moves_the_replay_start(
    home: Home, fake_llm: FakeOpenAI
) -> None:
    env = cli_env(home, fake_llm)
    fake_llm.reply("Hello!")
    run_cli_here("chat", "-m", "hi", env=env)
    fake_llm.reply("NOTHING")
    result = run_cli_here("chat", "-m", "/new", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "New session started.",
        "Archived 2 messages; nothing in them needed keeping.",
    ]
    assert history_entries(home) == []
    session_file = home.sessions / session_filename("cli:direct")
    state: dict[str, Any] = {}
    for line in session_file.read_text().splitlines():
        record = json.loads(line)
        state.update(record if record.get("_type") == "state" else {})
    assert state["replay_from"] == 2 and state["consolidating"] is None
    fake_llm.reply("Hi again")
    run_cli_here("chat", "-m", "hello?", env=env)
    assert [m["role"] for m in fake_llm.requests[-1]["messages"]] == ["system", "user"]
