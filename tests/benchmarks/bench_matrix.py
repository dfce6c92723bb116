"""100 chats at once through the real `nanomem gateway` on Matrix: a real Synapse on loopback
(its own venv, as the tests use it), the model (500 ms) in a process of its own, and Telegram's
figure from bench_gateway.py measured in the same run for the ratio (target ≤ 1.5×).

Each burst sends one message in each of 100 DMs at the same instant (one matrix-nio client per
person) and measures the wall time until every DM has the bot's reply, seen through a sync of
the bot's own account. Synapse shares the machine's cores with the gateway: on 2 cores its own
work on 200 events is in the figure.

    python tests/benchmarks/bench_matrix.py [--runs N] [--chats N] [--env KEY=VALUE ...] [--floor]

--floor answers with matrix_echo.py, a bare matrix-nio bot, instead of the gateway: what
Synapse itself allows on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import _common  # before any nanomem import: repository root on sys.path, litellm offline
import bench_gateway
from nio import AsyncClient, SyncResponse

from tests.fakes.telegram_server import FakeTelegram
from tests.helpers.synapse import Synapse, User

LATENCY = 0.5
RATIO = 1.5


def start_gateway(
    home: Path, model_url: str, server: Synapse, bot: User, owner: str, extra: dict[str, str]
) -> Any:
    env = _common.gateway_env(
        home,
        model_url,
        NANOMEM_MATRIX__ENABLED="true",
        NANOMEM_MATRIX__HOMESERVER=server.url,
        NANOMEM_MATRIX__USER_ID=bot.user_id,
        NANOMEM_MATRIX__ACCESS_TOKEN=bot.token,
        NANOMEM_MATRIX__OWNER=owner,
        NANOMEM_MATRIX__ALLOW_FROM='["*"]',
        PYTHONPATH=str(_common.REPO),
        **extra,
    )
    return subprocess.Popen(
        [sys.executable, "-m", "nanomem", "gateway"],
        env=env,
        cwd=_common.REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def client(server: Synapse, user: User) -> AsyncClient:
    found = AsyncClient(server.url, user.user_id)
    found.access_token = user.token
    return found


async def all_joined(clients: list[AsyncClient], rooms: list[str], bot: str) -> bool:
    for person, room in zip(clients, rooms, strict=True):
        found = await person.joined_members(room)
        if bot not in [m.user_id for m in getattr(found, "members", [])]:
            return False
    return True


async def replies_seen(watch: AsyncClient, bot: str, rooms: set[str], since: str) -> str:
    """Sync as the bot until it has sent a message into each of `rooms`; the next token."""
    left = set(rooms)
    while left:
        found = await watch.sync(30_000, since=since)
        assert isinstance(found, SyncResponse), found
        since = found.next_batch
        for room, info in found.rooms.join.items():
            if any(e.sender == bot for e in info.timeline.events):
                left.discard(room)
    return since


async def matrix_bursts(args: argparse.Namespace, tmp: Path, model_url: str) -> list[float]:
    server = Synapse(Path(tempfile.mkdtemp(dir=tmp))).start()
    gateway = None
    try:
        bot = server.register("bot")
        people = [server.register(f"person{n}") for n in range(args.chats)]
        home = Path(tempfile.mkdtemp(dir=tmp)) / "home"
        extra = dict(item.split("=", 1) for item in args.env)
        if args.floor:  # the same pattern answered by a bare matrix-nio bot: Synapse's floor
            echo = [sys.executable, str(Path(__file__).with_name("matrix_echo.py"))]
            gateway = subprocess.Popen([*echo, server.url, bot.user_id, bot.token, str(LATENCY)])
        else:
            gateway = start_gateway(home, model_url, server, bot, people[0].user_id, extra)
        clients = [client(server, p) for p in people]
        rooms = []
        for person in clients:
            made = await person.room_create(invite=[bot.user_id], is_direct=True)
            rooms.append(made.room_id)  # type: ignore[union-attr]
        watch = client(server, bot)
        joined = await watch.sync(0)
        assert isinstance(joined, SyncResponse)
        since = joined.next_batch
        while not await all_joined(clients, rooms, bot.user_id):
            await asyncio.sleep(0.5)
        # A warm-up turn loads what is lazy.
        await clients[0].room_send(rooms[0], "m.room.message", {"msgtype": "m.text", "body": "hi"})
        since = await replies_seen(watch, bot.user_id, {rooms[0]}, since)
        walls = []
        for _ in range(args.runs):
            started = time.perf_counter()
            body = {"msgtype": "m.text", "body": "hello there"}
            await asyncio.gather(
                *(
                    c.room_send(r, "m.room.message", body)
                    for c, r in zip(clients, rooms, strict=True)
                )
            )
            sent = time.perf_counter() - started
            since = await replies_seen(watch, bot.user_id, set(rooms), since)
            walls.append(time.perf_counter() - started)
            print(
                f"burst: the people's {len(rooms)} messages stored by Synapse in {sent:.3f} s, "
                f"every reply seen at {walls[-1]:.3f} s",
                file=sys.stderr,
            )
        for c in [*clients, watch]:
            await c.close()
        return walls
    finally:
        if gateway is not None:
            gateway.terminate()
            gateway.wait(timeout=60)
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--chats", type=int, default=100)
    parser.add_argument("--env", action="append", default=[], help="extra KEY=VALUE settings")
    parser.add_argument("--floor", action="store_true", help="a bare matrix-nio echo bot instead")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, _common.ModelServer(LATENCY) as model:
        walls = asyncio.run(matrix_bursts(args, Path(tmp), model.base_url))
        with FakeTelegram() as telegram:
            plain = SimpleNamespace(chats=args.chats, runs=args.runs, env=[], profile=None)
            telegram_walls = [
                w
                for w, _ in bench_gateway.session(
                    Path(tmp), model.base_url, telegram, plain, _common.REPO
                )
            ]
    matrix, base = _common.median(walls), _common.median(telegram_walls)
    ratio = matrix / base
    settings = ", ".join(args.env) or "default settings"
    print(f"### {args.chats} chats at once, model latency {LATENCY * 1000:.0f} ms, {settings}\n")
    label = "matrix-nio echo bot (floor)" if args.floor else "matrix (real Synapse)"
    rows = [
        [label, f"{matrix:.3f}", ", ".join(f"{w:.3f}" for w in walls)],
        [
            "telegram (loopback Bot API)",
            f"{base:.3f}",
            ", ".join(f"{w:.3f}" for w in telegram_walls),
        ],
    ]
    print(_common.table(["channel", "wall s (median)", "wall s (runs)"], rows))
    ok = ratio <= RATIO
    print(f"\n{_common.verdict(ok)}: Matrix {ratio:.2f}× Telegram's wall (≤ {RATIO}×)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
