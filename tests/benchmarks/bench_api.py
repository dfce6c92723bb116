"""The agent API through the real `nanomem gateway`: (a) 100 sessions at once with a 500 ms
model, wall time until every reply is complete (median of 3 bursts after a warm-up); (b) the
per-request overhead with a 0 ms model: client wall time minus the model server's own time,
median of 100 sequential requests. The model runs in a process of its own.

    python tests/benchmarks/bench_api.py [--runs N] [--sessions N] [--env KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common  # before any nanomem import: repository root on sys.path, litellm offline
import aiohttp

LATENCY = 0.5
WALL_TARGET = 0.8  # s until every reply of 100 sessions is complete
OVERHEAD_TARGET = 10.0  # ms per request, median
# Default settings: with an api_base, `llm.transport = "auto"` takes the lean client.
DEFAULTS: dict[str, str] = {}
AGENT_KEY = "nm-bench-agent-api-key-0123456789"  # the agent API always asks for one


def start_gateway(
    home: Path, model_url: str, extra: dict[str, str]
) -> tuple[subprocess.Popen[str], int]:
    keys = json.dumps([AGENT_KEY])
    env = _common.gateway_env(
        home, model_url, NANOMEM_API__ENABLED="true", NANOMEM_API__KEYS=keys, **extra
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "nanomem", "gateway"], env=env, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    port = 0
    for line in proc.stderr:
        if found := re.search(r"health at http://[\d.]+:(\d+)/health", line):
            port = int(found.group(1))
        if "api: running" in line:
            break
    # Nothing reads stderr from here on: keep the pipe from filling.
    proc.stderr.close()
    return proc, port


async def chat(http: aiohttp.ClientSession, url: str, session: str, text: str) -> str:
    body = {
        "model": "nanomem",
        "session_id": session,
        "messages": [{"role": "user", "content": text}],
    }
    auth = {"Authorization": f"Bearer {AGENT_KEY}"}
    async with http.post(url, json=body, headers=auth) as response:
        data = await response.json()
        if response.status != 200:
            raise RuntimeError(f"{response.status}: {data}")
        return str(data["choices"][0]["message"]["content"])


async def burst(url: str, sessions: int, round_no: int) -> float:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:
        started = time.perf_counter()
        await asyncio.gather(
            *(chat(http, url, f"burst{round_no}-{n}", "hello there") for n in range(sessions))
        )
        return time.perf_counter() - started


async def overhead(url: str, model: _common.ModelServer, requests: int) -> list[float]:
    """Per request: client wall time minus the model server's own handling time, in ms."""
    spent: list[float] = []
    async with aiohttp.ClientSession() as http:
        await chat(http, url, "overhead", "warm up")
        model.drain()
        for n in range(requests):
            started = time.perf_counter()
            await chat(http, url, f"overhead-{n % 10}", "hello there")
            wall = time.perf_counter() - started
            _, busy = await asyncio.to_thread(model.drain)
            spent.append((wall - busy) * 1000)
    return spent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--env", action="append", default=[], help="extra KEY=VALUE settings")
    args = parser.parse_args()
    extra = DEFAULTS | dict(item.split("=", 1) for item in args.env)
    with tempfile.TemporaryDirectory() as tmp:
        with _common.ModelServer(LATENCY) as model:
            gateway, port = start_gateway(Path(tmp) / "a", model.base_url, extra)
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            try:
                asyncio.run(burst(url, 1, -1))  # the first turn loads what is lazy
                walls = [asyncio.run(burst(url, args.sessions, n)) for n in range(args.runs)]
            finally:
                gateway.terminate()
                gateway.wait(timeout=60)
        with _common.ModelServer(0.0) as model:
            gateway, port = start_gateway(Path(tmp) / "b", model.base_url, extra)
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            try:
                spent = asyncio.run(overhead(url, model, args.requests))
            finally:
                gateway.terminate()
                gateway.wait(timeout=60)
    wall, cost = _common.median(walls), _common.median(spent)
    ok = wall <= WALL_TARGET and cost <= OVERHEAD_TARGET
    settings = ", ".join(f"{k}={v}" for k, v in extra.items())
    print(f"### The agent API through the gateway ({settings})\n")
    rows = [
        [
            f"{args.sessions} sessions at once, model {LATENCY * 1000:.0f} ms: wall s",
            f"{wall:.3f}",
            ", ".join(f"{w:.3f}" for w in walls),
            f"≤ {WALL_TARGET} s",
        ],
        [
            f"per-request overhead, model 0 ms: ms (median of {len(spent)})",
            f"{cost:.2f}",
            f"p90 {_common.percentile(spent, 0.9):.2f}",
            f"≤ {OVERHEAD_TARGET:.0f} ms",
        ],
    ]
    print(_common.table(["measure", "median", "runs / spread", "target"], rows))
    print(
        f"\n{_common.verdict(ok)}: {wall:.3f} s ≤ {WALL_TARGET} s and "
        f"{cost:.2f} ms ≤ {OVERHEAD_TARGET:.0f} ms"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
