"""schedules.json at its bounds: memory of reading and arming it, and of every schedule firing
in the same second, in the real gateway (in-process: durable inbox, APScheduler, the agent loop;
a fake pushing channel and a zero-latency model that keeps nothing).

The file holds schedule.max_total entries (one bad zone among them, the rest repeating every
minute, one per chat, all next due a few seconds after the start), text padded so the file is
just under its 1 MiB bound. Before the fix, every firing parsed the whole file and held that
parse while it fired: 1,000 entries firing together took 531 MB and logged the bad entry once
per firing.

    python tests/benchmarks/bench_schedules.py
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import _common
from loguru import logger

from nanomem.agent.channel import Capabilities
from nanomem.app import build_app
from nanomem.config import ScheduleSettings, load_settings
from nanomem.features.schedules import ScheduledTurns
from nanomem.features.schedules.store import MAX_FILE_BYTES, ScheduleStore
from nanomem.gateway.service import Gateway
from nanomem.providers.provider import Reply
from tests.helpers.channels import FakeChannel

TARGET_READ_MIB = 16.0  # reading and checking the bound-max file
TARGET_FIRING_MIB = 64.0  # the whole start, and every schedule firing at once
LEAD_S = 8  # from writing the file to the first firing


class Quiet:
    """A model that answers at once and keeps nothing (the scripted one keeps every call)."""

    async def complete(self, messages: list[dict[str, Any]], *args: Any, **kwargs: Any) -> Reply:
        return Reply(content="ok", finish_reason="stop")


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def write_file(path: Path, total: int, due: datetime) -> int:
    created = (due - timedelta(minutes=1)).isoformat()
    entries: list[dict[str, Any]] = [
        {
            "id": "badzone",
            "session": "telegram:0",
            "text": "x",
            "created_at": created,
            "timezone": "Mars/Olympus",
            "cron": "* * * * *",
        }
    ]
    for n in range(1, total):
        entries.append(
            {
                "id": f"{n:08x}",
                "session": f"telegram:{n}",
                "text": "",
                "created_at": created,
                "timezone": "Europe/Berlin",
                "every_minutes": 1,
            }
        )
    bare = len(json.dumps({"v": 1, "schedules": entries}, indent=1))
    pad = (MAX_FILE_BYTES - 4096 - bare) // (total - 1)
    for item in entries[1:]:
        item["text"] = "remind me " + "x" * (pad - 10)
    body = json.dumps({"v": 1, "schedules": entries}, indent=1)
    path.write_text(body)
    return len(body)


async def run(root: Path) -> tuple[list[tuple[str, str, str]], bool]:
    home = _common.new_home(root)
    total = ScheduleSettings().max_total
    size = write_file(home.schedules, total, datetime.now(UTC) + timedelta(seconds=LEAD_S))
    bad_lines: list[str] = []
    logger.remove()
    logger.add(lambda m: bad_lines.append(str(m)), filter=lambda r: "badzone" in r["message"])

    base = rss_mib()
    store = ScheduleStore(home.schedules, home.lock("schedules"))
    tracemalloc.start()
    started = time.perf_counter()
    stored = store.read()
    read_ms = (time.perf_counter() - started) * 1000
    heap_mib = tracemalloc.get_traced_memory()[1] / 2**20  # its peak
    tracemalloc.stop()
    read_mib = rss_mib() - base
    assert len(stored.schedules) == total - 1, stored.problem
    del stored, store

    overrides: dict[str, dict[str, Any]] = {
        "llm": {"model": "openai/fake"},
        "gateway": {"port": 0},
        "dream": {"enabled": False},
    }
    app = build_app(load_settings(home.config, overrides), home, Quiet(), durable=True)
    channel = FakeChannel("telegram", capabilities=Capabilities(pushes=True))
    gateway = Gateway(app, {"telegram": channel})
    before = rss_mib()
    task = asyncio.create_task(gateway.run())
    started = time.perf_counter()
    peak, armed_s = before, None
    while len(channel.sent) < total - 1:
        peak = max(peak, rss_mib())
        report = app.feature(ScheduledTurns).health()["schedules"].body
        if armed_s is None and report and report["armed"] == total - 1:
            armed_s = time.perf_counter() - started
        assert time.perf_counter() - started < 180, "the firings did not all arrive"
        await asyncio.sleep(0.05)
    fired_s = time.perf_counter() - started
    peak = max(peak, rss_mib())
    gateway.request_stop()
    await task
    firing_mib = peak - before
    read = f"{read_mib:.1f} MiB (Python heap peak {heap_mib:.1f} MiB; {read_ms:.0f} ms)"
    rows = [
        ("file", f"{total} entries, {size / 1024:.0f} KiB", ""),
        ("read and check it: RSS growth", read, f"≤ {TARGET_READ_MIB:.0f} MiB"),
        ("gateway start to all armed", f"{armed_s or 0:.1f} s", ""),
        (
            "start, all fire at once: peak RSS growth",
            f"{firing_mib:.1f} MiB",
            f"≤ {TARGET_FIRING_MIB:.0f} MiB",
        ),
        ("start to every reply delivered", f"{fired_s:.1f} s", ""),
        ("log lines naming the bad entry", str(len(bad_lines)), "1"),
    ]
    met = read_mib <= TARGET_READ_MIB and firing_mib <= TARGET_FIRING_MIB and len(bad_lines) == 1
    return rows, met


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        rows, met = asyncio.run(run(Path(tmp)))
    print("| measure | figure | target |\n|---|---|---|")
    for name, figure, target in rows:
        print(f"| {name} | {figure} | {target} |")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
