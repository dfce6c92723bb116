"""Per-turn overhead vs session length, through the real stack and litellm.

A zero-latency loopback model answers every turn, so what is timed is nanomem + litellm +
HTTP on loopback. Sessions are pre-filled with 10, 1,000 and 10,000 realistic messages;
the turns of the three sizes are interleaved so drift on a shared machine hits all alike.

    python tests/benchmarks/bench_turn.py [--turns N] [--profile]

--profile prints a cProfile of the turns on the largest session (cumulative time).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common  # before any nanomem import: repository root on sys.path, litellm offline

from nanomem.app import App
from nanomem.bus import InboundMessage
from tests.fakes.openai_server import FakeOpenAI

SIZES = (10, 1_000, 10_000)
WARMUP = 3
TARGET = 1.2  # turn time at 10,000 messages / turn time at 10 messages
WORDS = ["the", "memory", "note", "project", "meeting", "remind", "budget", "draft", "plan"]


def text(rng: random.Random, low: int = 200, high: int = 400) -> str:
    size = rng.randint(low, high)
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < size:
        words.append(rng.choice(WORDS))
    return " ".join(words)[:size]


def transcript(count: int, seed: int = 7) -> list[dict[str, Any]]:
    """Alternating user/assistant messages; every fourth exchange reads a file with a tool."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    exchange = 0
    while len(out) < count:
        exchange += 1
        runtime = f"[runtime · 2025-01-{exchange % 28 + 1:02d} 10:00:00 CET (UTC+0100) · cli]"
        out.append({"role": "user", "content": f"{runtime}\n\n{text(rng)}"})
        if exchange % 4 == 0:
            call_id = f"call_{exchange}"
            arguments = '{"path": "memory/MEMORY.md"}'
            function = {"name": "read_file", "arguments": arguments}
            call = {"id": call_id, "type": "function", "function": function}
            out.append({"role": "assistant", "content": None, "tool_calls": [call]})
            tool = {"role": "tool", "tool_call_id": call_id, "name": "read_file"}
            out.append({**tool, "content": text(rng, 300, 800)})
        out.append({"role": "assistant", "content": text(rng)})
    return out[:count]


async def prefill(app: App, key: str, count: int) -> None:
    """Write the transcript in big batches, then consolidate it the way the product would
    have along the way (echo "summaries" from the fake model), so the replay window is in
    its steady state rather than a backlog of 10,000 unsummarised messages."""
    session = await app.sessions.get(key)
    messages = transcript(count)
    for start in range(0, len(messages), 2_000):
        await app.sessions.append(session, messages[start : start + 2_000])
    while await app.consolidator.consolidate(session):
        pass


async def turn(app: App, chat_id: str, n: int) -> float:
    before = asyncio.all_tasks()
    started = time.perf_counter()
    reply = await app.loop.handle(InboundMessage("cli", chat_id, f"turn {n}", sender_id="u"))
    await _common.settle(before)  # background work this turn started counts too
    elapsed = time.perf_counter() - started
    assert reply is not None and reply.kind == "reply", reply
    return elapsed


async def measure(
    app: App, server: FakeOpenAI, turns: int, profile: cProfile.Profile | None
) -> dict[int, tuple[list[float], list[int]]]:
    for size in SIZES:
        await prefill(app, f"cli:s{size}", size)
    server.clear()
    times: dict[int, list[float]] = {size: [] for size in SIZES}
    sent: dict[int, list[int]] = {size: [] for size in SIZES}
    for n in range(WARMUP + turns):
        for size in SIZES:
            first = len(server.requests)  # this turn's model request comes next
            if profile is not None and size == SIZES[-1] and n >= WARMUP:
                profile.enable()
                elapsed = await turn(app, f"s{size}", n)
                profile.disable()
            else:
                elapsed = await turn(app, f"s{size}", n)
            if n >= WARMUP:
                times[size].append(elapsed)
                sent[size].append(len(server.requests[first]["messages"]))
        server.clear()  # the server keeps every request body; don't let that grow
    await app.loop.close()
    return {size: (times[size], sent[size]) for size in SIZES}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--transport", choices=["litellm", "direct"], default="litellm")
    args = parser.parse_args()
    profile = cProfile.Profile() if args.profile else None
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAI() as server:
        app = _common.make_app(
            _common.new_home(Path(tmp)), server.base_url, llm={"transport": args.transport}
        )
        results = asyncio.run(measure(app, server, args.turns, profile))
    base = _common.median(results[SIZES[0]][0])
    rows = []
    for size, (times, sent) in results.items():
        mid = _common.median(times)
        ratio = f"{mid / base:.2f}×" + (f" (target ≤ {TARGET}×)" if size == SIZES[-1] else "")
        p90 = _common.percentile(times, 0.9)
        replayed = f"{min(sent)}–{max(sent)}"
        rows.append([f"{size:,}", replayed, f"{mid * 1000:.1f}", f"{p90 * 1000:.1f}", ratio])
    ok = _common.median(results[SIZES[-1]][0]) / base <= TARGET
    headers = [
        "session messages",
        "messages sent to the model",
        "median ms",
        "p90 ms",
        "ratio to 10",
    ]
    print(
        f"### Per-turn overhead vs session length ({args.turns} turns, zero-latency model, "
        f"llm.transport = {args.transport})\n"
    )
    print(_common.table(headers, rows))
    print(f"\n{_common.verdict(ok)}: ratio at {SIZES[-1]:,} messages ≤ {TARGET}×")
    if profile is not None:
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(40)
        print(f"\ncProfile of the turns at {SIZES[-1]:,} messages:\n{out.getvalue()}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
