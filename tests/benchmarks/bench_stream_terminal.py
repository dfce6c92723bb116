"""From the model's first streamed piece to that text on the terminal, through the real agent
loop, bus and terminal channel (rich's live region writing to a terminal-like file).

A model that streams a reply word by word (the first word after 20 ms) is asked 20 times; each
run measures the time from the moment the model hands over its first piece to the moment the
terminal's output first contains it. Target: ≤ 50 ms (median).

    python tests/benchmarks/bench_stream_terminal.py [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common  # before any nanomem import: repository root on sys.path, litellm offline

from channels.terminal.channel import TerminalChannel
from nanomem.agent.channel import pump_outbound
from nanomem.providers.provider import Reply, TextSink

TARGET_MS = 50.0
FIRST_WORD = "Streaming"


class Watched(io.StringIO):
    """A terminal's output that notes when the first word appeared."""

    def __init__(self) -> None:
        super().__init__()
        self.seen_at: float | None = None

    def write(self, text: str) -> int:
        if self.seen_at is None and FIRST_WORD in text:
            self.seen_at = time.perf_counter()
        return super().write(text)

    def isatty(self) -> bool:
        return True


class StreamingModel:
    def __init__(self) -> None:
        self.first_piece_at = 0.0

    async def complete(self, messages: Any, tools: Any = None, **options: Any) -> Reply:
        on_text: TextSink | None = options.get("on_text")
        words = [f"{FIRST_WORD} ", *(f"word{n} " for n in range(40))]
        await asyncio.sleep(0.02)
        if on_text is not None:
            self.first_piece_at = time.perf_counter()
            for word in words:
                await on_text(word)
                await asyncio.sleep(0.005)
        return Reply("".join(words))


async def one_run(home: _common.Home, model: StreamingModel) -> float:
    from rich.console import Console

    out = Watched()
    app = _common.make_app(home, "http://127.0.0.1:9", provider=model)
    bus = app.bus
    channel = TerminalChannel(
        history_file=home.chat_history,
        console=Console(file=out, force_terminal=True, width=100, height=40),
    )
    await channel.start(bus)
    tasks = [asyncio.create_task(app.loop.run()), asyncio.create_task(pump_outbound(channel, bus))]
    try:
        await channel._exchange("hello")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await app.aclose()
    assert out.seen_at is not None, "the first word never reached the terminal"
    return (out.seen_at - model.first_piece_at) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = _common.new_home(Path(tmp))
        model = StreamingModel()
        latencies = [asyncio.run(one_run(home, model)) for _ in range(args.runs)]
    median = _common.median(latencies)
    worst = max(latencies)
    ok = median <= TARGET_MS
    print("### First streamed piece → visible on the terminal\n")
    rows = [
        [
            args.runs,
            f"{median:.1f}",
            f"{_common.percentile(latencies, 0.9):.1f}",
            f"{worst:.1f}",
            f"≤ {TARGET_MS:.0f} ms",
        ]
    ]
    print(_common.table(["runs", "median ms", "p90 ms", "max ms", "target"], rows))
    print(f"\n{_common.verdict(ok)}: median {median:.1f} ms ≤ {TARGET_MS:.0f} ms")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
