"""100 chats at once through the real `nanomem gateway` with the Discord channel: discord.py
against the loopback Discord, the model (500 ms) in a process of its own, default settings but
for the endpoints; and Telegram's figure from the same run (bench_gateway.py's burst), for the
ratio.

Each burst sends one DM from each of 100 people at the same instant and measures the wall time
until the loopback Discord holds a reply in every DM, and the gateway's CPU time meanwhile.
Median of the bursts after a warm-up; the gateway is a separate process, the fakes run here.

    python tests/benchmarks/bench_discord.py [--runs N] [--chats N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common  # before any nanomem import: repository root on sys.path, litellm offline
import bench_gateway

from tests.fakes.discord_server import FakeDiscord
from tests.fakes.telegram_server import FakeTelegram

TARGET_RATIO = 1.5  # Discord's wall time within 1.5 × Telegram's
FIRST_ID = 400000000000000000


def start_gateway(
    home: Path, model_url: str, discord: FakeDiscord, chats: int
) -> subprocess.Popen[str]:
    people = [str(FIRST_ID + n) for n in range(chats + 1)]
    env = _common.gateway_env(
        home,
        model_url,
        NANOMEM_DISCORD__ENABLED="true",
        NANOMEM_DISCORD__TOKEN=discord.token,
        NANOMEM_DISCORD__API_BASE=discord.api_base,
        NANOMEM_DISCORD__ALLOW_FROM=json.dumps(people),
        PYTHONPATH=str(_common.REPO),
    )
    return subprocess.Popen(
        [sys.executable, "-m", "nanomem", "gateway"],
        env=env,
        cwd=_common.REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def replied(discord: FakeDiscord, channels: list[str], before: dict[str, int]) -> bool:
    return all(len(discord.sent(c)) > before.get(c, 0) for c in channels)


def burst(discord: FakeDiscord, people: list[str], gateway: int) -> tuple[float, float]:
    channels = [discord.dm_channel(p) for p in people]
    before = {c: len(discord.sent(c)) for c in channels}
    cpu = bench_gateway.cpu_seconds(gateway)
    started = time.perf_counter()
    for person in people:
        discord.dm(person, "hello there")
    discord.wait(lambda: replied(discord, channels, before), timeout=120)
    return time.perf_counter() - started, bench_gateway.cpu_seconds(gateway) - cpu


def discord_session(
    tmp: Path, model_url: str, args: argparse.Namespace
) -> list[tuple[float, float]]:
    people = [str(FIRST_ID + 1 + n) for n in range(args.chats)]
    home = Path(tempfile.mkdtemp(dir=tmp)) / "home"
    with FakeDiscord() as discord:
        gateway = start_gateway(home, model_url, discord, args.chats)
        try:
            discord.wait(discord.connected, timeout=60)
            warm = discord.dm_channel(str(FIRST_ID))
            discord.dm(str(FIRST_ID), "warm up")  # the first turn loads what is lazy
            discord.wait(lambda: discord.sent(warm), timeout=60)
            return [burst(discord, people, gateway.pid) for _ in range(args.runs)]
        finally:
            gateway.terminate()
            gateway.wait(timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--chats", type=int, default=100)
    args = parser.parse_args()
    args.env, args.profile = [], None  # bench_gateway's session reads these
    with (
        tempfile.TemporaryDirectory() as tmp,
        _common.ModelServer(bench_gateway.LATENCY) as model,
        FakeTelegram() as telegram,
    ):
        telegram_bursts = bench_gateway.session(
            Path(tmp), model.base_url, telegram, args, _common.REPO
        )
        discord_bursts = discord_session(Path(tmp), model.base_url, args)
    telegram_wall = _common.median([w for w, _ in telegram_bursts])
    discord_wall = _common.median([w for w, _ in discord_bursts])
    ratio = discord_wall / telegram_wall
    print(f"### {args.chats} chats at once, model latency {bench_gateway.LATENCY * 1000:.0f} ms\n")
    headers = ["channel", "wall s (median)", "wall s (runs)", "gateway CPU s (median)", "target"]
    rows = [
        bench_gateway.row("telegram", telegram_bursts, "—"),
        bench_gateway.row("discord", discord_bursts, f"≤ {TARGET_RATIO} × telegram"),
    ]
    print(_common.table(headers, rows))
    ok = ratio <= TARGET_RATIO
    print(f"\n{_common.verdict(ok)}: Discord {ratio:.2f} × Telegram's wall time (≤ {TARGET_RATIO})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
