"""100 chats at once through the real `nanomem gateway` on Slack: slack-bolt in Socket Mode
against the loopback Slack, the model (500 ms) in a process of its own; Telegram's gateway
beside it, the same bursts, for the ratio.

Each burst sends one DM in each of 100 conversations at the same instant and measures the wall
time until the fake has every reply (woken by each post, not by polling), and the gateway's CPU
time meanwhile. Both gateways run at once, and their bursts alternate (Slack, Telegram, Slack,
...): on a shared machine the other work comes and goes within seconds, and bursts minutes
apart (all of Slack's, then all of Telegram's) compared different loads, not the channels.
The ratio is the median of each pair's. Median of 3 bursts each after a warm-up; the gateways
are separate processes, the fakes run in this one.

    python tests/benchmarks/bench_slack.py [--runs N] [--chats N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import _common  # before any nanomem import: repository root on sys.path, litellm offline
import bench_gateway

from tests.fakes.slack_server import APP_TOKEN, BOT_TOKEN, FakeSlack
from tests.fakes.telegram_server import FakeTelegram

TARGET_RATIO = 1.5  # Slack's wall within 1.5× Telegram's
Burst = tuple[float, float, float]  # wall s, gateway CPU s, s to hand the messages over


def conversations(fake: FakeSlack, chats: int) -> list[tuple[str, str]]:
    """(DM, member) pairs, the first one the warm-up's."""
    pairs = [(f"D{n:08d}", f"U{n:08d}") for n in range(chats + 1)]
    for channel, user in pairs:
        fake.add_user(user, user.lower())
        fake.add_conversation(channel, "im", user)
    return pairs


def slack_gateway(tmp: Path, model_url: str, fake: FakeSlack) -> subprocess.Popen[bytes]:
    home = Path(tempfile.mkdtemp(dir=tmp)) / "home"
    env = _common.gateway_env(
        home,
        model_url,
        NANOMEM_SLACK__ENABLED="true",
        NANOMEM_SLACK__BOT_TOKEN=BOT_TOKEN,
        NANOMEM_SLACK__APP_TOKEN=APP_TOKEN,
        NANOMEM_SLACK__API_BASE=fake.base_url,
        NANOMEM_SLACK__ALLOW_FROM=json.dumps(["*"]),
        PYTHONPATH=str(_common.REPO),
    )
    return subprocess.Popen(
        [sys.executable, "-m", "nanomem", "gateway"],
        env=env,
        cwd=_common.REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def slack_burst(fake: FakeSlack, pairs: list[tuple[str, str]], pid: int) -> Burst:
    before = len(fake.posted)
    cpu = bench_gateway.cpu_seconds(pid)
    started = time.perf_counter()
    for channel, user in pairs:
        fake.send_message(channel, user, "hello there")
    handed = time.perf_counter() - started
    if fake.wait_posted(before + len(pairs), 120) < before + len(pairs):
        raise TimeoutError("not every chat was answered")
    wall = time.perf_counter() - started
    return wall, bench_gateway.cpu_seconds(pid) - cpu, handed


def telegram_burst(telegram: FakeTelegram, chat_ids: range, pid: int) -> Burst:
    wanted = set(chat_ids)
    before = telegram.wait_for_total(wanted, 0)
    cpu = bench_gateway.cpu_seconds(pid)
    started = time.perf_counter()
    for chat in chat_ids:
        telegram.send_text(chat, "hello there")
    handed = time.perf_counter() - started
    if telegram.wait_for_total(wanted, before + len(chat_ids), 120) < before + len(chat_ids):
        raise TimeoutError("not every chat was answered")
    wall = time.perf_counter() - started
    return wall, bench_gateway.cpu_seconds(pid) - cpu, handed


def measure(
    tmp: Path, model_url: str, fake: FakeSlack, telegram: FakeTelegram, chats: int, runs: int
) -> tuple[list[Burst], list[Burst]]:
    """Both gateways started and warmed up, then their bursts in turn."""
    pairs = conversations(fake, chats)
    chat_ids = range(bench_gateway.FIRST_ID + 1, bench_gateway.FIRST_ID + 1 + chats)
    home = Path(tempfile.mkdtemp(dir=tmp)) / "home"
    slack = slack_gateway(tmp, model_url, fake)
    tg = bench_gateway.start_gateway(home, model_url, telegram, chats, {})
    try:
        deadline = time.monotonic() + 60
        while not fake.connected() and time.monotonic() < deadline:
            time.sleep(0.1)
        fake.send_message(*pairs[0], "warm up")  # the first turn loads what is lazy
        fake.wait_posted(len(fake.posted) + 1, 60)
        warm = telegram.wait_for_total({bench_gateway.FIRST_ID}, 0)
        telegram.send_text(bench_gateway.FIRST_ID, "warm up")
        telegram.wait_for_total({bench_gateway.FIRST_ID}, warm + 1, timeout=60)
        bursts: tuple[list[Burst], list[Burst]] = ([], [])
        takes: list[Callable[[], Burst]] = [
            lambda: slack_burst(fake, pairs[1:], slack.pid),
            lambda: telegram_burst(telegram, chat_ids, tg.pid),
        ]
        for _ in range(runs):
            for kept, take in zip(bursts, takes, strict=True):
                time.sleep(1.0)  # the last burst's stragglers (typing, marks) settle first
                kept.append(take())
        return bursts
    finally:
        for gateway in (slack, tg):
            gateway.terminate()
            gateway.wait(timeout=60)


def row(name: str, bursts: list[Burst]) -> list[str]:
    walls = [w for w, _, _ in bursts]
    return [
        name,
        f"{_common.median(walls):.3f}",
        ", ".join(f"{w:.3f}" for w in walls),
        f"{_common.median([c for _, c, _ in bursts]):.2f}",
        f"{_common.median([h for _, _, h in bursts]):.3f}",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--chats", type=int, default=100)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        _common.ModelServer(bench_gateway.LATENCY) as model,
        FakeTelegram() as telegram,
        FakeSlack() as fake,
    ):
        slack, tg = measure(Path(tmp), model.base_url, fake, telegram, args.chats, args.runs)
    ratio = _common.median([s[0] / t[0] for s, t in zip(slack, tg, strict=True)])
    cpu = _common.median([s[1] / t[1] for s, t in zip(slack, tg, strict=True) if t[1] > 0])
    print(f"### {args.chats} chats at once, model latency {bench_gateway.LATENCY * 1000:.0f} ms\n")
    headers = ["channel", "wall s (median)", "wall s (runs)", "gateway CPU s", "handed over s"]
    print(_common.table(headers, [row("slack", slack), row("telegram", tg)]))
    ok = ratio <= TARGET_RATIO
    print(
        f"\n{_common.verdict(ok)}: Slack {ratio:.2f}× Telegram by wall, bursts paired "
        f"(target ≤ {TARGET_RATIO}×); {cpu:.2f}× by the gateway's CPU"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
