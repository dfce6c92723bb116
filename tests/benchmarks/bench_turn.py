"""Per-turn overhead vs session length, through the real stack and litellm.

A zero-latency loopback model (a process of its own, as a real model server would be)
answers every turn, so what is timed is nanomem + litellm + HTTP on loopback + the fake
server reading the request. Sessions are pre-filled with 10, 1,000 and 10,000 realistic
messages; the turns of the three sizes are interleaved so drift on a shared machine hits
all alike.

    python tests/benchmarks/bench_turn.py [--turns N] [--transport T] [--profile]
                                          [--usage-records N]

Overhead is a turn's wall time less the fake server's own time handling its requests
(reading and parsing a request grows with its size; a zero-latency model costs nothing),
which the server reports; wall time and the server's share are printed beside it. Both
transports are measured unless --transport picks one. The target is judged on the direct
transport (nanomem's own work plus the lean client on httpx), as in bench_concurrency.py;
litellm's row adds litellm's own passes over every message and is printed for reference.
--profile prints a cProfile of the turns on the largest session (cumulative time).
--usage-records N starts from a usage.jsonl of N records (a year of a busy home is ~200,000):
every model call appends one, and a turn must cost the same whatever the file's length.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common  # before any nanomem import: repository root on sys.path, litellm offline

from nanomem.agent.bus import InboundMessage
from nanomem.app import App
from nanomem.audience import Sender
from nanomem.features.consolidation import Consolidator

SIZES = (10, 1_000, 10_000)
WARMUP = 3
TARGET = 1.2  # turn overhead at 10,000 messages / turn overhead at 10 messages
JUDGED = "direct"  # the transport the target is judged on (see the docstring)
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
    while await app.feature(Consolidator).consolidate(session):
        pass


async def turn(app: App, chat_id: str, n: int) -> tuple[float, float]:
    """Wall and CPU seconds (this process, its threads included) of one turn."""
    before = asyncio.all_tasks()
    cpu = time.process_time()
    started = time.perf_counter()
    reply = await app.loop.handle(InboundMessage("cli", chat_id, f"turn {n}", Sender("u")))
    await _common.settle(before)  # background work this turn started counts too
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu
    assert reply is not None and reply.part.style == "reply", reply
    return elapsed, cpu


@dataclass
class Turns:
    """What the measured turns of one session size took."""

    wall: list[float] = field(default_factory=list)
    server: list[float] = field(default_factory=list)  # the fake model's own handling
    sent: list[int] = field(default_factory=list)  # messages in the turn's model request
    cpu: list[float] = field(default_factory=list)  # this process's CPU (the server's is not)

    @property
    def overhead(self) -> list[float]:
        return [wall - server for wall, server in zip(self.wall, self.server, strict=True)]


async def measure(
    app: App, server: _common.ModelServer, turns: int, profile: cProfile.Profile | None
) -> dict[int, Turns]:
    for size in SIZES:
        await prefill(app, f"cli:s{size}", size)
    results = {size: Turns() for size in SIZES}
    for n in range(WARMUP + turns):
        for size in SIZES:
            server.drain()  # this turn's model request comes next
            if profile is not None and size == SIZES[-1] and n >= WARMUP:
                profile.enable()
                elapsed, cpu = await turn(app, f"s{size}", n)
                profile.disable()
            else:
                elapsed, cpu = await turn(app, f"s{size}", n)
            sent, busy = server.drain()
            if n >= WARMUP:
                results[size].wall.append(elapsed)
                results[size].server.append(busy)
                results[size].sent.append(sent[0])
                results[size].cpu.append(cpu)
    await app.loop.close()
    await app.aclose()
    return results


def report(transport: str, turns: int, results: dict[int, Turns]) -> bool:
    ms = _common.median
    base = ms(results[SIZES[0]].overhead)
    rows = []
    for size, measured in results.items():
        overhead = ms(measured.overhead)
        ratio = f"{overhead / base:.2f}×" + (f" (≤ {TARGET}×)" if size == SIZES[-1] else "")
        rows.append(
            [
                f"{size:,}",
                f"{min(measured.sent)}–{max(measured.sent)}",
                f"{ms(measured.wall) * 1000:.1f}",
                f"{ms(measured.server) * 1000:.2f}",
                f"{overhead * 1000:.1f}",
                f"{_common.percentile(measured.overhead, 0.9) * 1000:.1f}",
                ratio,
                f"{ms(measured.cpu) * 1000:.1f}",
            ]
        )
    ok = ms(results[SIZES[-1]].overhead) / base <= TARGET
    headers = [
        "session messages",
        "messages sent",
        "wall ms",
        "model server ms",
        "overhead ms",
        "overhead p90",
        "overhead ratio to 10",
        "CPU ms",
    ]
    print(f"### llm.transport = {transport} ({turns} turns a size, medians)\n")
    print(_common.table(headers, rows))
    judged = "" if transport == JUDGED else " (reference: the target is judged on direct)"
    verdict = _common.verdict(ok)
    print(f"\n{verdict}: overhead at {SIZES[-1]:,} messages ≤ {TARGET}× at 10{judged}\n")
    return ok


def fill_usage(path: Path, count: int) -> None:
    """`count` records of calls made over the past year, as the usage feature writes them."""
    from nanomem.features.usage import Record

    start = time.time() - 365 * 86400
    with path.open("w") as fh:
        for n in range(count):
            at = start + n * (365 * 86400 / max(count, 1))
            record = Record(at, f"telegram:{n % 40}", "turn", f"{n:012x}", "openai/fake", 900, 40)
            fh.write(record.to_json() + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--usage-records", type=int, default=0)
    parser.add_argument("--transport", choices=["litellm", "direct", "both"], default="both")
    args = parser.parse_args()
    transports = ["litellm", "direct"] if args.transport == "both" else [args.transport]
    print("## Per-turn overhead vs session length (zero-latency model)\n")
    verdicts: dict[str, bool] = {}
    for transport in transports:
        profile = cProfile.Profile() if args.profile else None
        with tempfile.TemporaryDirectory() as tmp, _common.ModelServer() as server:
            home = _common.new_home(Path(tmp))
            if args.usage_records:
                fill_usage(home.usage, args.usage_records)
                size = home.usage.stat().st_size / 2**20
                print(f"usage.jsonl: {args.usage_records:,} records, {size:.0f} MiB\n")
            app = _common.make_app(home, server.base_url, llm={"transport": transport})
            results = asyncio.run(measure(app, server, args.turns, profile))
        verdicts[transport] = report(transport, args.turns, results)
        if profile is not None:
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(40)
            print(f"cProfile of the turns at {SIZES[-1]:,} messages:\n{out.getvalue()}")
    return 0 if verdicts.get(JUDGED, all(verdicts.values())) else 1


if __name__ == "__main__":
    sys.exit(main())
