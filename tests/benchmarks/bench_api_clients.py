"""What an agent framework's requests cost the agent API, through the real `nanomem gateway`
with a 0 ms model that answers as a model would (tests/fakes/schema_model.py, in a process of
its own): per request, client wall time minus the model server's own time, median of N, for
(a) a plain message, (b) a client-tool round trip (the request that pauses on the client's
tool, and the one that brings its result), (c) a response_format answer checked against its
JSON schema; and (d) the round trip again in a session 200 turns long, as a ratio to (b):
a paused turn's work must not grow with its session.

    python tests/benchmarks/bench_api_clients.py [--requests N] [--env KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import _common  # before any nanomem import: repository root on sys.path, litellm offline
import aiohttp
from bench_api import AGENT_KEY, start_gateway

OVERHEAD_TARGET = 10.0  # ms per request, median, as for a plain message (bench_api.py)
GROWTH_TARGET = 1.2  # a long session's round trip against a short one's
LONG_TURNS = 200
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
FORECAST = {
    "type": "json_schema",
    "json_schema": {
        "name": "forecast",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {
                    "type": "array",
                    "minItems": 3,
                    "items": {
                        "type": "object",
                        "properties": {
                            "day": {"enum": ["mon", "tue", "wed", "thu", "fri"]},
                            "high": {"type": "integer", "minimum": -50, "maximum": 60},
                        },
                        "required": ["day", "high"],
                        "additionalProperties": False,
                    },
                },
            },
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}


class Client:
    def __init__(self, http: aiohttp.ClientSession, url: str, model: _common.ModelServer) -> None:
        self.http, self.url, self.model = http, url, model

    async def post(self, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """The answer, and the ms it cost besides the model server's own time."""
        await asyncio.to_thread(self.model.drain)
        auth = {"Authorization": f"Bearer {AGENT_KEY}"}
        started = asyncio.get_running_loop().time()
        async with self.http.post(self.url, json={"model": "nanomem", **body}, headers=auth) as r:
            data = await r.json()
            if r.status != 200:
                raise RuntimeError(f"{r.status}: {data}")
        wall = asyncio.get_running_loop().time() - started
        _, busy = await asyncio.to_thread(self.model.drain)
        return data, (wall - busy) * 1000

    async def round_trip(self, session: str) -> tuple[float, float]:
        """A request that pauses on the client's tool, then the one with its result."""
        asked = [{"role": "user", "content": 'use get_weather {"city": "Paris"}'}]
        common = {"session_id": session, "tools": [WEATHER]}
        paused, first = await self.post({**common, "messages": asked})
        message = paused["choices"][0]["message"]
        (call,) = message["tool_calls"]
        result = {"role": "tool", "tool_call_id": call["id"], "content": "sunny, 24 C"}
        answered, second = await self.post({**common, "messages": [*asked, message, result]})
        assert answered["choices"][0]["finish_reason"] == "stop", answered
        return first, second


async def measure(url: str, model: _common.ModelServer, requests: int) -> dict[str, list[float]]:
    spent: dict[str, list[float]] = {"plain": [], "paused": [], "result": [], "format": []}
    spent |= {"long paused": [], "long result": []}
    async with aiohttp.ClientSession() as http:
        client = Client(http, url, model)
        await client.round_trip("warm-up")  # the first turn loads what is lazy
        asked = [{"role": "user", "content": "forecast?"}]
        await client.post({"session_id": "warm-up", "messages": asked, "response_format": FORECAST})
        for turn in range(LONG_TURNS):  # a long session: earlier turns, then round trips
            await client.post(
                {"session_id": "long", "messages": [{"role": "user", "content": f"note {turn}"}]}
            )
        for n in range(requests):
            plain = {
                "session_id": f"plain-{n % 10}",
                "messages": [{"role": "user", "content": "hi"}],
            }
            spent["plain"].append((await client.post(plain))[1])
            first, second = await client.round_trip(f"tools-{n % 10}")
            spent["paused"].append(first)
            spent["result"].append(second)
            asked = [{"role": "user", "content": "The forecast for Paris?"}]
            body = {
                "session_id": f"format-{n % 10}",
                "messages": asked,
                "response_format": FORECAST,
            }
            answer, cost = await client.post(body)
            json.loads(answer["choices"][0]["message"]["content"])
            spent["format"].append(cost)
            first, second = await client.round_trip("long")
            spent["long paused"].append(first)
            spent["long result"].append(second)
    return spent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--env", action="append", default=[], help="extra KEY=VALUE settings")
    args = parser.parse_args()
    extra = dict(item.split("=", 1) for item in args.env)
    with tempfile.TemporaryDirectory() as tmp, _common.ModelServer(0.0, schema_model=True) as model:
        gateway, port = start_gateway(Path(tmp) / "home", model.base_url, extra)
        try:
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            spent = asyncio.run(measure(url, model, args.requests))
        finally:
            gateway.terminate()
            gateway.wait(timeout=60)
    medians = {name: _common.median(values) for name, values in spent.items()}
    short = medians["paused"] + medians["result"]
    growth = (medians["long paused"] + medians["long result"]) / short
    worst = max(medians["paused"], medians["result"], medians["format"])
    ok = worst <= OVERHEAD_TARGET and growth <= GROWTH_TARGET
    print("### What agent frameworks' requests cost the agent API (0 ms model)\n")
    rows = [
        [name, f"{medians[name]:.2f}", f"{_common.percentile(values, 0.9):.2f}"]
        for name, values in spent.items()
    ]
    print(
        _common.table(
            [f"request (ms besides the model, median of {args.requests})", "median", "p90"], rows
        )
    )
    print(f"\nround trip in a session {LONG_TURNS} turns long against a new one: {growth:.2f}×")
    print(
        f"\n{_common.verdict(ok)}: each kind ≤ {OVERHEAD_TARGET:.0f} ms ({worst:.2f}) and the "
        f"long session's round trip ≤ {GROWTH_TARGET}× ({growth:.2f}×)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
