"""100 chats at once through the real `nanomem gateway`: python-telegram-bot against the loopback
Bot API, the model (500 ms) in a process of its own, default settings but for the endpoints.

Each burst sends one message in each of 100 private chats at the same instant and measures the
wall time until the Bot API has received every reply, and the gateway's CPU time meanwhile (all
its threads; steadier than the wall on a busy machine). Median of 3 bursts after a warm-up; the
gateway is a separate process, the fake Bot API runs in this one.

`--before PATH` measures another checkout (say the base commit in a git worktree) alike with
this interpreter: gateway sessions alternate, before then this one, twice, and both rows print.

    python tests/benchmarks/bench_gateway.py [--runs N] [--chats N] [--env KEY=VALUE ...]
        [--before PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common  # before any nanomem import: repository root on sys.path, litellm offline

from tests.fakes.telegram_server import FakeTelegram

LATENCY = 0.5
TARGET = 0.8  # seconds until every reply is sent
FIRST_ID = 5000


def start_gateway(
    home: Path,
    model_url: str,
    telegram: FakeTelegram,
    chats: int,
    extra: dict[str, str],
    profile: str | None = None,
    repo: Path = _common.REPO,
) -> subprocess.Popen[str]:
    env = _common.gateway_env(
        home,
        model_url,
        NANOMEM_TELEGRAM__ENABLED="true",
        NANOMEM_TELEGRAM__TOKEN=telegram.token,
        NANOMEM_TELEGRAM__BASE_URL=telegram.base_url,
        NANOMEM_TELEGRAM__BASE_FILE_URL=telegram.base_file_url,
        NANOMEM_TELEGRAM__ALLOW_FROM=json.dumps(list(range(FIRST_ID, FIRST_ID + chats + 1))),
        PYTHONPATH=str(repo),  # this checkout's code (or the one measured before it)
        **extra,
    )
    profiled = ["-m", "cProfile", "-o", profile] if profile else []
    return subprocess.Popen(
        [sys.executable, *profiled, "-m", "nanomem", "gateway"],
        env=env,
        cwd=repo,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def burst(
    telegram: FakeTelegram, chat_ids: range, gateway: int, timeout: float = 120
) -> tuple[float, float]:
    """Wall and gateway CPU seconds. Woken by each reply the fake Bot API records, not by
    polling it: on 2 cores a polling loop here would take CPU from the gateway it measures."""
    wanted = set(chat_ids)
    before = telegram.wait_for_total(wanted, 0)
    cpu = cpu_seconds(gateway)
    started = time.perf_counter()
    for chat in chat_ids:
        telegram.send_text(chat, "hello there")
    got = telegram.wait_for_total(wanted, before + len(chat_ids), timeout)
    if got < before + len(chat_ids):
        raise TimeoutError(f"only {got - before} replies")
    return time.perf_counter() - started, cpu_seconds(gateway) - cpu


def cpu_seconds(pid: int) -> float:
    """A process's CPU time so far, all its threads (user + system; in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def session(
    tmp: Path, model_url: str, telegram: FakeTelegram, args: argparse.Namespace, repo: Path
) -> list[tuple[float, float]]:
    """One gateway of `repo` on a new home: a warm-up turn, then the bursts' wall and CPU."""
    chat_ids = range(FIRST_ID + 1, FIRST_ID + 1 + args.chats)
    extra = dict(item.split("=", 1) for item in args.env)
    home = Path(tempfile.mkdtemp(dir=tmp)) / "home"
    gateway = start_gateway(home, model_url, telegram, args.chats, extra, args.profile, repo)
    try:
        warm = telegram.wait_for_total({FIRST_ID}, 0)
        telegram.send_text(FIRST_ID, "warm up")  # the first turn loads what is lazy
        telegram.wait_for_total({FIRST_ID}, warm + 1, timeout=60)
        return [burst(telegram, chat_ids, gateway.pid) for _ in range(args.runs)]
    finally:
        gateway.terminate()
        gateway.wait(timeout=60)


def row(name: str, bursts: list[tuple[float, float]], target: str) -> list[str]:
    walls, cpus = [w for w, _ in bursts], [c for _, c in bursts]
    runs = ", ".join(f"{w:.3f}" for w in walls)
    return [name, f"{_common.median(walls):.3f}", runs, f"{_common.median(cpus):.2f}", target]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--chats", type=int, default=100)
    parser.add_argument("--env", action="append", default=[], help="extra KEY=VALUE settings")
    parser.add_argument("--profile", help="write a cProfile of the gateway to this file")
    parser.add_argument("--before", type=Path, help="another checkout, measured alike")
    args = parser.parse_args()
    walls: list[tuple[float, float]] = []
    before: list[tuple[float, float]] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        _common.ModelServer(LATENCY) as model,
        FakeTelegram() as telegram,
    ):
        rounds = 2 if args.before is not None else 1
        for _ in range(rounds):  # alternating: the machine's other work hits both alike
            if args.before is not None:
                before += session(Path(tmp), model.base_url, telegram, args, args.before.resolve())
            walls += session(Path(tmp), model.base_url, telegram, args, _common.REPO)
    wall = _common.median([w for w, _ in walls])
    ok = wall <= TARGET
    settings = ", ".join(args.env) or "default settings"
    print(
        f"### {args.chats} chats at once through the gateway, "
        f"model latency {LATENCY * 1000:.0f} ms\n"
    )
    rows = [row(settings, walls, f"≤ {TARGET} s")]
    if before:
        rows.append(row(f"{settings}, before: {args.before}", before, "—"))
    headers = ["settings", "wall s (median)", "wall s (runs)", "gateway CPU s (median)", "target"]
    print(_common.table(headers, rows))
    print(f"\n{_common.verdict(ok)}: {wall:.3f} s ≤ {TARGET} s until every reply was sent")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
