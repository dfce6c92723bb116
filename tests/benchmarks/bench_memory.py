"""Memory bookkeeping per turn: it must not grow with what is already consolidated or archived.

1. Estimating the next prompt (what the Consolidator does before and after every turn) and
   picking the replay window, for sessions holding 100, 1,000 and 10,000 messages of which all
   but the last 40 are consolidated. One "turn" = two appended messages, then estimate + window.
2. history.jsonl with 1,000 and 100,000 entries: one append (fsync included), the chat's recent
   entries for the prompt after that append (the cache is invalidated), and Dream's read of the
   entries after a cursor near the end.

    python tests/benchmarks/bench_memory.py
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import _common

from nanomem.features.consolidation import Consolidator
from nanomem.memory.history import HistoryEntry, HistoryStore, NewEntry
from nanomem.memory.session import session_filename
from tests.fakes.openai_server import FakeOpenAI

SESSION_SIZES = (100, 1_000, 10_000)
HISTORY_SIZES = (1_000, 100_000)
TURNS = 200
RAW_TAIL = 40
TARGET = 1.2  # largest / smallest


def words(rng: random.Random, count: int) -> str:
    return " ".join(
        rng.choice(("plan", "note", "tea", "budget", "draft", "meeting")) for _ in range(count)
    )


def write_session(path: Path, key: str, size: int, rng: random.Random) -> None:
    lines = [json.dumps({"_type": "session", "version": 1, "key": key, "created_at": "2026-01-01"})]
    for i in range(size):
        role = "user" if i % 2 == 0 else "assistant"
        lines.append(
            json.dumps({"role": role, "content": words(rng, 60), "ts": "2026-01-01T00:00"})
        )
    lines.append(json.dumps({"_type": "state", "replay_from": size - RAW_TAIL}))
    path.write_text("\n".join(lines) + "\n")


async def bench_estimate(root: Path) -> tuple[list[list[object]], bool]:
    rng = random.Random(7)
    home = _common.new_home(root)
    with FakeOpenAI() as server:
        app = _common.make_app(home, server.base_url)
        results: dict[int, float] = {}
        for size in SESSION_SIZES:
            key = f"cli:bench{size}"
            write_session(home.sessions / session_filename(key), key, size, rng)
            load_started = time.perf_counter()
            session = await app.sessions.get(key)
            # The first estimate tokenises the raw tail.
            await app.feature(Consolidator).estimate(session)
            load_ms = (time.perf_counter() - load_started) * 1000
            samples = []
            for i in range(TURNS):
                session.messages.extend(  # in memory: the file append is timed separately below
                    [
                        {"role": "user", "content": words(rng, 60)},
                        {"role": "assistant", "content": words(rng, 60)},
                    ]
                )
                if i % 20 == 19:  # consolidation moves the boundary now and then
                    session.state["replay_from"] = session.replay_from + 20
                started = time.perf_counter()
                estimate = await app.feature(Consolidator).estimate(session)
                session.history(app.budget.prompt_limit)
                samples.append((time.perf_counter() - started) * 1000)
            assert estimate > 0
            results[size] = _common.median(samples)
            results[-size] = load_ms
        await app.loop.close()
    base = results[SESSION_SIZES[0]]
    rows: list[list[object]] = [
        [size, f"{results[-size]:.1f}", f"{results[size]:.3f}", f"{results[size] / base:.2f}×"]
        for size in SESSION_SIZES
    ]
    return rows, results[SESSION_SIZES[-1]] / base <= TARGET


def bench_history(root: Path) -> tuple[list[list[object]], bool]:
    rows: list[list[object]] = []
    timings: dict[int, list[float]] = {}
    for size in HISTORY_SIZES:
        folder = root / f"history{size}" / "memory"
        folder.mkdir(parents=True)
        stamp = "2026-01-01T00:00:00+00:00"
        with (folder / "history.jsonl").open("w") as fh:
            for cursor in range(1, size + 1):
                session = "cli:direct" if cursor % 10 == 0 else f"telegram:{cursor % 7}"
                content = "- 2026-01-01: " + "a remembered fact " * 8
                fh.write(HistoryEntry(cursor, stamp, session, content, "summary").to_json() + "\n")
        (folder / ".dream_cursor").write_text(f"{size - 200}\n")
        os.sync()  # a long-lived archive is on disk; don't time the flush of a fresh fixture
        store = HistoryStore(folder)
        appends, recents, reads = [], [], []
        for _ in range(50):
            started = time.perf_counter()
            asyncio.run(store.append([NewEntry("cli:direct", "- a new fact", "summary")]))
            appends.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            store.recent("cli:direct", 4000)
            recents.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            store.read_after(store.last_cursor() - 20, 20)
            reads.append((time.perf_counter() - started) * 1000)
        medians = [_common.median(v) for v in (appends, recents, reads)]
        timings[size] = medians
        rows.append([size, *(f"{m:.3f}" for m in medians)])
    small, large = timings[HISTORY_SIZES[0]], timings[HISTORY_SIZES[-1]]
    # A whole-file re-parse would cost ~100x more with 100x the entries; a binary search or
    # a bounded backwards read costs a small constant more. Under 3x tells them apart on a
    # shared machine whose fsync and cache timings wander.
    ok = all(big <= little * 3 for little, big in zip(small, large, strict=True))
    return rows, ok


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        estimate_rows, estimate_ok = asyncio.run(bench_estimate(Path(tmp) / "a"))
        history_rows, history_ok = bench_history(Path(tmp) / "b")
    print("## Estimate + replay window per turn (all but the last 40 messages consolidated)\n")
    print(
        _common.table(
            ["messages", "first load ms", "per turn ms (median)", "vs 100"], estimate_rows
        )
    )
    print(
        f"\nTarget: per-turn cost at 10,000 ≤ {TARGET}× the cost at 100 — "
        f"{_common.verdict(estimate_ok)}\n"
    )
    print("## history.jsonl operations (median of 50, ms)\n")
    print(
        _common.table(
            ["entries", "append (fsync)", "recent for prompt", "read after cursor"], history_rows
        )
    )
    print(
        "\nTarget: 100× the entries costs under 3× the time (no whole-file re-parse) — "
        f"{_common.verdict(history_ok)}"
    )
    return 0 if estimate_ok and history_ok else 1


if __name__ == "__main__":
    sys.exit(main())
