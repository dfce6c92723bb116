"""100 chats at once against a model that takes 500 ms, through the real stack and litellm.

Each run sends one message in each of 100 new chats, all together (asyncio.gather over
AgentLoop.handle) with agent.max_concurrent_turns = 100; median of 3 runs after a warm-up.
Ideal wall time: 0.5 s; the rest is CPU spent per turn on one event loop. Two reference
rows split that CPU: litellm alone (our LiteLLMProvider, 100 calls, no agent loop) and the
agent loop alone (the model port stubbed with a 500 ms sleep, no litellm, no HTTP).

    python tests/benchmarks/bench_concurrency.py [--runs N] [--profile]

--profile prints a cProfile (cumulative) of one more burst of the full stack.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import _common  # before any nanomem import: repository root on sys.path, litellm offline

from nanomem.agent.bus import InboundMessage
from nanomem.app import App
from nanomem.providers.litellm_provider import LiteLLMProvider
from nanomem.providers.scripted import ScriptedProvider

CHATS = 100
LATENCY = 0.5
TARGET = 0.75  # seconds of wall time for the whole burst, full stack
Burst = Callable[[str], Awaitable[None]]


def chats(app: App) -> Burst:
    async def burst(run: str) -> None:
        messages = [InboundMessage("cli", f"{run}-{i}", "hello there") for i in range(CHATS)]
        replies = await asyncio.gather(*(app.loop.handle(m) for m in messages))
        failed = [r for r in replies if r is None or r.part.style != "reply"]
        assert not failed, failed[:3]

    return burst


def calls(provider: LiteLLMProvider) -> Burst:
    async def burst(run: str) -> None:
        prompt = [{"role": "user", "content": f"hello there ({run})"}]
        await asyncio.gather(*(provider.complete(prompt) for _ in range(CHATS)))

    return burst


async def timed(burst: Burst, run: str) -> tuple[float, float]:
    """Wall seconds until every reply is in, and process CPU seconds including the
    background work the burst started (litellm's logging, after-turn hooks)."""
    before = asyncio.all_tasks()
    cpu, started = time.process_time(), time.perf_counter()
    await burst(run)
    wall = time.perf_counter() - started
    await _common.settle(before)
    return wall, time.process_time() - cpu


async def measure(bursts: dict[str, Burst], runs: int) -> dict[str, list[tuple[float, float]]]:
    results: dict[str, list[tuple[float, float]]] = {}
    for name, burst in bursts.items():
        await timed(burst, f"{name}-warmup")
        results[name] = [await timed(burst, f"{name}-{n}") for n in range(runs)]
    return results


async def profiled(burst: Burst, profile: cProfile.Profile) -> None:
    profile.enable()
    await timed(burst, "profiled")
    profile.disable()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    profile = cProfile.Profile() if args.profile else None
    slots = {"max_concurrent_turns": CHATS}
    with tempfile.TemporaryDirectory() as tmp, _common.ModelServer(LATENCY) as server:
        direct = _common.make_app(
            _common.new_home(Path(tmp, "d")),
            server.base_url,
            agent=slots,
            llm={"transport": "direct"},
        )
        full = _common.make_app(_common.new_home(Path(tmp, "a")), server.base_url, agent=slots)
        stub = ScriptedProvider(latency=LATENCY)
        loop_only = _common.make_app(
            _common.new_home(Path(tmp, "b")), server.base_url, provider=stub, agent=slots
        )
        bursts = {
            "full stack, llm.transport = direct": chats(direct),
            "full stack, llm.transport = litellm (default)": chats(full),
            "litellm alone: LiteLLMProvider.complete ×100": calls(
                LiteLLMProvider(full.settings.llm)
            ),
            "agent loop alone: model port stubbed (sleep)": chats(loop_only),
        }

        async def run_all() -> dict[str, list[tuple[float, float]]]:
            results = await measure(bursts, args.runs)
            if profile is not None:
                await profiled(chats(full), profile)
            for app in (direct, full, loop_only):
                await app.loop.close()
                await app.aclose()
            return results

        results = asyncio.run(run_all())
    rows = []
    for name, measured in results.items():
        walls = [wall for wall, _ in measured]
        cpu_ms = _common.median([cpu for _, cpu in measured]) / CHATS * 1000
        runs = ", ".join(f"{w:.3f}" for w in walls)
        rows.append([name, f"{_common.median(walls):.3f}", runs, f"{cpu_ms:.2f}"])
    rows[0].append(f"≤ {TARGET} s")
    for row in rows[1:]:
        row.append("")
    wall = _common.median([wall for wall, _ in next(iter(results.values()))])
    ok = wall <= TARGET
    print(f"### {CHATS} chats at once, model latency {LATENCY * 1000:.0f} ms\n")
    headers = ["what runs", "wall s (median)", "wall s (runs)", "CPU ms per turn", "target"]
    print(_common.table(headers, rows))
    print(f"\n{_common.verdict(ok)}: full stack (direct transport) {wall:.3f} s ≤ {TARGET} s")
    print("(The model server runs in a process of its own; CPU is this process's only.)")
    if profile is not None:
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(45)
        print(f"\ncProfile of one full-stack burst:\n{out.getvalue()}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
