"""Several processes on one home: the real `nanomem` command in subprocesses, litellm over HTTP
to the loopback model, a real dulwich repository checked by real git."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import threading
from collections import Counter
from typing import Any

import pytest

from nanomem.home import Home
from nanomem.memory.history import HistoryStore, NewEntry
from tests.conftest import NANOMEM, cli_env, run_cli
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.helpers import wait_until

WAIT_S = 120  # a safety net only: every wait below ends on an event
KILL_POLL_S = 0.005  # a kill lands close to the moment awaited (the journal, the commit)
# Two Dream processes at once, this many times: 8 in the suite; the figure is taken with
# NANOMEM_DREAM_ROUNDS=20 (docs/development.md, Tests).
DREAM_ROUNDS = int(os.environ.get("NANOMEM_DREAM_ROUNDS", "8"))
FACT = re.compile(r"^- (fact-\d+)$", re.M)


class DreamModel:
    """Learns every `- fact-N` line of the history into MEMORY.md, one append per fact. The
    analysis request of a run waits at a gate, so a test decides when a run may go on."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()  # a run is in its model call

    def __call__(self, request: dict[str, Any]) -> Step:
        messages = request["messages"]
        task = str(messages[1]["content"]).split("## Current memory files")[0]
        if not request.get("tools"):  # phase 1, analyse
            self.entered.set()
            self.gate.wait(WAIT_S)
            return Step.reply("NEW:\n" + "\n".join(f"- {f}" for f in FACT.findall(task)))
        if messages[-1]["role"] == "tool":
            return Step.reply("Recorded the new facts.")
        calls: list[tuple[str, Any]] = [
            ("append_memory", {"file": "memory/MEMORY.md", "line": f"- {fact}"})
            for fact in FACT.findall(task)
        ]
        return Step.tool_calls(calls) if calls else Step.reply("Nothing to change.")


def add_facts(home: Home, numbers: range) -> None:
    """Archive facts the way the Consolidator does: through the history store and its lock."""
    store = HistoryStore(home.workspace / "memory", home.lock("history"))
    asyncio.run(store.append([NewEntry("cli:direct", f"- fact-{n}", "summary") for n in numbers]))


def dream_process(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*NANOMEM, "dream"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def memory_facts(home: Home) -> Counter[str]:
    return Counter(FACT.findall((home.workspace / "memory" / "MEMORY.md").read_text()))


def assert_git_clean(home: Home) -> None:
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    fsck = subprocess.run(
        [git, f"--git-dir={home.memory_git}", "fsck", "--strict"], capture_output=True, text=True
    )
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr


@pytest.fixture
def dream_env(home: Home, fake_llm: FakeOpenAI) -> tuple[dict[str, str], DreamModel]:
    model = DreamModel()
    fake_llm.set_fallback(model)
    # The lean transport: each process starts in well under a second (no litellm import).
    env = cli_env(home, fake_llm, NANOMEM_LLM__TIMEOUT_S="300", NANOMEM_LLM__TRANSPORT="direct")
    return env, model


@pytest.mark.timeout(900)  # up to 20 rounds of two processes on a loaded machine
def test_two_dreams_at_once_learn_every_fact_exactly_once(
    home: Home, dream_env: tuple[dict[str, str], DreamModel]
) -> None:
    env, model = dream_env
    runs = busy = 0
    added = 0
    for _ in range(DREAM_ROUNDS):
        add_facts(home, range(added, added + 3))
        added += 3
        model.gate.clear()
        model.entered.clear()
        pair = [dream_process(env), dream_process(env)]
        wait_until(
            model.entered.is_set,
            what="a Dream to reach the model",
            timeout=WAIT_S,
            every=KILL_POLL_S,
        )
        wait_until(
            lambda pair=pair: any(p.poll() is not None for p in pair),
            what="a Dream to give up",
            timeout=WAIT_S,
            every=KILL_POLL_S,
        )
        loser = next(p for p in pair if p.poll() is not None)
        winner = next(p for p in pair if p is not loser)
        _, err = loser.communicate()
        assert loser.returncode == 1 and "Dream is already running" in err
        busy += 1
        add_facts(home, range(added, added + 2))  # archived while the run thinks
        added += 2
        model.gate.set()
        out, err = winner.communicate(timeout=WAIT_S)
        assert winner.returncode == 0, err
        assert out.startswith("Learned from")
        runs += 1
    final = run_cli("dream", env=env, timeout=WAIT_S)  # the facts archived during the last run
    assert final.returncode == 0, final.stderr
    facts = memory_facts(home)
    duplicated = sum(count - 1 for count in facts.values() if count > 1)
    skipped = sum(1 for n in range(added) if facts[f"fact-{n}"] == 0)
    print(
        f"\ntwo-process Dream: runs={runs} refused={busy} facts={added} "
        f"duplicated_lines={duplicated} skipped_entries={skipped}"
    )
    assert (runs, busy, duplicated, skipped) == (DREAM_ROUNDS, DREAM_ROUNDS, 0, 0)
    cursor = int((home.workspace / "memory" / ".dream_cursor").read_text())
    assert cursor == added
    assert_git_clean(home)


@pytest.mark.parametrize("moment", ["model call", "journal", "commit"])
def test_a_dream_killed_at_any_moment_loses_and_repeats_nothing(
    home: Home, dream_env: tuple[dict[str, str], DreamModel], moment: str
) -> None:
    env, model = dream_env
    add_facts(home, range(4))
    journal = home.dream_journal
    ref = home.memory_git / "refs" / "heads" / "main"
    first = ref.read_bytes()
    killed = dream_process(env)
    if moment == "model call":
        model.gate.clear()
        wait_until(
            model.entered.is_set,
            what="the run to reach the model",
            timeout=WAIT_S,
            every=KILL_POLL_S,
        )
    elif moment == "journal":
        wait_until(journal.exists, what="the journal", timeout=WAIT_S, every=KILL_POLL_S)
    else:
        wait_until(
            lambda: ref.read_bytes() != first, what="the commit", timeout=WAIT_S, every=KILL_POLL_S
        )
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=WAIT_S)
    model.gate.set()
    again = run_cli("dream", env=env, timeout=WAIT_S)
    assert again.returncode == 0, again.stderr
    add_facts(home, range(4, 6))
    assert run_cli("dream", env=env, timeout=WAIT_S).returncode == 0
    assert memory_facts(home) == Counter(f"fact-{n}" for n in range(6))
    assert int((home.workspace / "memory" / ".dream_cursor").read_text()) == 6
    assert not journal.exists()
    assert_git_clean(home)


def test_a_stale_git_ref_lock_is_removed_and_dream_runs(
    home: Home, dream_env: tuple[dict[str, str], DreamModel]
) -> None:
    env, _ = dream_env
    stale = home.memory_git / "refs" / "heads" / "main.lock"
    stale.write_text("0" * 40 + "\n")  # what a commit killed mid-way leaves
    add_facts(home, range(2))
    result = run_cli("dream", env=env, timeout=WAIT_S)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Learned from 2")
    assert not stale.exists()
    log = (home.logs / "nanomem.log").read_text()
    assert "removed the stale lock file" in log and str(stale) in log
    assert_git_clean(home)


def test_a_restore_while_another_process_dreams_is_refused_and_loses_nothing(
    home: Home, dream_env: tuple[dict[str, str], DreamModel]
) -> None:
    env, model = dream_env
    (home.workspace / "USER.md").write_text("# User\n- Name: Ada\n")
    add_facts(home, range(3))
    assert run_cli("dream", env=env, timeout=WAIT_S).returncode == 0
    listing = run_cli("memory", "restore", env=env).stdout
    learned = listing.splitlines()[1].split()[0]
    add_facts(home, range(3, 5))
    model.gate.clear()
    model.entered.clear()
    running = dream_process(env)
    wait_until(
        model.entered.is_set,
        what="the other process's Dream to reach the model",
        timeout=WAIT_S,
        every=KILL_POLL_S,
    )
    versions = run_cli("memory", "restore", env=env).stdout
    refused = run_cli("memory", "restore", learned, env=env)
    assert refused.returncode == 1
    assert "Dream is running; try again when it has finished" in refused.stderr
    assert run_cli("memory", "restore", env=env).stdout == versions  # no version was made
    model.gate.set()
    out, err = running.communicate(timeout=WAIT_S)
    assert running.returncode == 0 and out.startswith("Learned from 2"), err
    assert memory_facts(home) == Counter(f"fact-{n}" for n in range(5))
    undone = run_cli("memory", "restore", learned, env=env)  # now it may
    assert undone.returncode == 0, undone.stderr
    assert "also undid later changes" in undone.stdout  # the second run's, named
    assert memory_facts(home) == Counter()
    assert "- Name: Ada" in (home.workspace / "USER.md").read_text()
    assert_git_clean(home)


SUMMARY_MARK = "from nanomem, not from the person"
WORD = re.compile(r"word-\d+")


def chat_model(request: dict[str, Any]) -> Step:
    """Summaries name every word-N they were given; replies echo the word, at length."""
    messages = request["messages"]
    last = str(messages[-1]["content"])
    if SUMMARY_MARK in last:
        seen = " ".join(str(m.get("content")) for m in messages[1:-1] if m["role"] == "user")
        words = sorted(set(WORD.findall(seen)), key=lambda w: int(w.split("-")[1]))
        return Step.reply("\n".join(f"- 2026-11-22: the user said {w}" for w in words))
    said = WORD.findall(last)[-1]
    return Step.reply(f"You said {said}. " + "A careful, detailed answer follows here. " * 15)


def test_two_chats_on_one_session_take_turns_and_archive_once(
    home: Home, fake_llm: FakeOpenAI
) -> None:
    fake_llm.set_fallback(chat_model)
    env = cli_env(
        home,
        fake_llm,
        NANOMEM_LLM__CONTEXT_WINDOW_TOKENS="6144",
        NANOMEM_LLM__MAX_TOKENS="256",
        NANOMEM_MEMORY__KEEP_RECENT_TURNS="2",
        NANOMEM_DREAM__ENABLED="false",
    )
    padding = " context" * 30
    for n in range(8):  # close to the consolidation threshold
        result = run_cli("chat", "-m", f"Remember word-{n}.{padding}", env=env, timeout=WAIT_S)
        assert result.returncode == 0, result.stderr
    fake_llm.model_latency = 0.5  # both processes are in a turn at the same time
    for rounds in range(3):
        base = 100 + 10 * rounds
        pair = [
            subprocess.Popen(
                [*NANOMEM, "chat", "-m", f"Remember word-{base + i}.{padding}"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(2)
        ]
        for process in pair:
            out, err = process.communicate(timeout=WAIT_S)
            assert process.returncode == 0, err
            assert out.startswith("You said word-")
    sessions = list(home.sessions.glob("*.jsonl"))
    assert len(sessions) == 1
    records = [json.loads(line) for line in sessions[0].read_text().splitlines()]
    assert sum(1 for r in records if r.get("_type") == "session") == 1
    assert records[0].get("_type") == "session"
    talk = [r for r in records if r.get("role") in ("user", "assistant")]
    for user, reply in zip(talk[::2], talk[1::2], strict=True):  # whole turns, one after another
        assert user["role"] == "user" and reply["role"] == "assistant"
        assert reply["content"].startswith(f"You said {WORD.findall(user['content'])[-1]}.")
    history = home.workspace / "memory" / "history.jsonl"
    entries = [json.loads(line) for line in history.read_text().splitlines()]
    assert entries, "no consolidation happened: the test would prove nothing"
    archived = Counter(w for e in entries for w in set(WORD.findall(e["content"])))
    assert [w for w, count in archived.items() if count > 1] == []
    assert [e["cursor"] for e in entries] == list(range(1, len(entries) + 1))
