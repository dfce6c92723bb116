"""100 chats at once through the real `nanomem gateway` on Slack: slack-bolt in Socket Mode
against the loopback Slack, the model (500 ms) in a process of its own; Telegram's figure from
the same run (bench_gateway's session) for the ratio.

Each burst sends one DM in each of 100 conversations at the same instant and measures the wall
time until the fake Slack has every reply (woken by each post, not by polling). Median of 3
bursts after a warm-up; the gateway is a separate process, the fake Slack runs in this one.

    python tests/benchmarks/bench_slack.py [--runs N] [--chats N]
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

from tests.fakes.slack_server import APP_TOKEN, BOT_TOKEN, FakeSlack
from tests.fakes.telegram_server import FakeTelegram

TARGET_RATIO = 1.5  # Slack's wall within 1.5× Telegram's


def conversations(fake: FakeSlack, chats: int) -> list[tuple[str, str]]:
    """(DM, member) pairs, the first one the warm-up's."""
    pairs = [(f"D{n:08d}", f"U{n:08d}") for n in range(chats + 1)]
    for channel, user in pairs:
        fake.add_user(user, user.lower())
        fake.add_conversation(channel, "im", user)
    return pairs


def session(tmp: Path, model_url: str, fake: FakeSlack, chats: int, runs: int) -> list[float]:
    pairs = conversations(fake, chats)
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
    gateway = subprocess.Popen(
        [sys.executable, "-m", "nanomem", "gateway"],
        env=env,
        cwd=_common.REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not fake.connected() and time.monotonic() < deadline:
            time.sleep(0.1)
        fake.send_message(*pairs[0], "warm up")  # the first turn loads what is lazy
        fake.wait_posted(len(fake.posted) + 1, 60)
        walls = []
        for _ in range(runs):
            before = len(fake.posted)
            started = time.perf_counter()
            for channel, user in pairs[1:]:
                fake.send_message(channel, user, "hello there")
            if fake.wait_posted(before + chats, 120) < before + chats:
                raise TimeoutError("not every chat was answered")
            walls.append(time.perf_counter() - started)
        return walls
    finally:
        gateway.terminate()
        gateway.wait(timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--chats", type=int, default=100)
    args = parser.parse_args()
    telegram_args = argparse.Namespace(runs=args.runs, chats=args.chats, env=[], profile=None)
    with (
        tempfile.TemporaryDirectory() as tmp,
        _common.ModelServer(bench_gateway.LATENCY) as model,
        FakeTelegram() as telegram,
        FakeSlack() as fake,
    ):
        slack = session(Path(tmp), model.base_url, fake, args.chats, args.runs)
        bursts = bench_gateway.session(
            Path(tmp), model.base_url, telegram, telegram_args, _common.REPO
        )
    tg = _common.median([w for w, _ in bursts])
    wall = _common.median(slack)
    ratio = wall / tg
    print(f"### {args.chats} chats at once, model latency {bench_gateway.LATENCY * 1000:.0f} ms\n")
    rows = [
        ["slack", f"{wall:.3f}", ", ".join(f"{w:.3f}" for w in slack)],
        ["telegram", f"{tg:.3f}", ", ".join(f"{w:.3f}" for w, _ in bursts)],
    ]
    print(_common.table(["channel", "wall s (median)", "wall s (runs)"], rows))
    ok = ratio <= TARGET_RATIO
    print(f"\n{_common.verdict(ok)}: Slack {ratio:.2f}× Telegram (target ≤ {TARGET_RATIO}×)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
