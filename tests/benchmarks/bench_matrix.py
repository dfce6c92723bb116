"""100 chats at once on Matrix, in one run: the real `nanomem gateway` against a real Synapse on
loopback (its own venv, as the tests use it), Synapse's floor (the same DMs answered by
matrix_echo.py, a bare matrix-nio bot, on a Synapse of its own), and Telegram's figure from
bench_gateway.py; the model (500 ms) in a process of its own.

Each burst sends one message in each of 100 DMs at the same instant (one matrix-nio client per
person) and measures the wall time until every DM has the bot's first message, seen through a
sync of the bot's account, then waits for the bot to fall quiet (a reply's last edit, typing
taken down) so a burst never pays for the one before. Synapse's access log says what the bot
asked of it meanwhile (sends, typing notices, syncs, member lookups, …), per message. Synapse
shares the machine's 2 cores with the bot: its work on 200 events and more is in the figure.

The target: the gateway within 1.5× Telegram's wall. Where Synapse's floor alone is past that
(it is on a 2-core machine: storing the people's 100 messages takes seconds), the gateway's own
share is judged instead: within 1.3× the floor's wall.

    python tests/benchmarks/bench_matrix.py [--runs N] [--chats N] [--env KEY=VALUE ...]
        [--only floor|gateway] [--synapse JSON]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import _common  # before any nanomem import: repository root on sys.path, litellm offline
import bench_gateway
from nio import AsyncClient, SyncResponse

from tests.fakes.telegram_server import FakeTelegram
from tests.helpers.synapse import Synapse, User
from tests.helpers.synapse_log import KINDS, AccessLog, Requests

LATENCY = 0.5
RATIO = 1.5  # of Telegram's wall
FLOOR_RATIO = 1.3  # of the floor's wall, where the floor alone is past RATIO
QUIET_S = 2.0  # a burst is over when the bot has asked nothing but syncs for this long
# The watcher reads only the bot's messages: its own syncs cost Synapse little.
WATCH_FILTER = {
    "presence": {"not_types": ["*"]},
    "account_data": {"not_types": ["*"]},
    "room": {
        "timeline": {"types": ["m.room.message"], "limit": 20},
        "state": {"lazy_load_members": True, "types": []},
        "ephemeral": {"not_types": ["*"]},
        "account_data": {"not_types": ["*"]},
    },
}
LABELS = {"floor": "matrix-nio echo bot (floor)", "gateway": "nanomem gateway"}


@dataclass
class Burst:
    wall: float  # until every DM showed the bot's first message
    sent: float  # until Synapse had stored the people's messages
    synapse_cpu: float  # Synapse's CPU seconds until the bot fell quiet
    bot_cpu: float
    requests: Requests  # the bot's, until it fell quiet


def start_bot(
    kind: str, home: Path, model_url: str, server: Synapse, bot: User, owner: str, extra: Any
) -> subprocess.Popen[str]:
    if kind == "floor":
        echo = [sys.executable, str(Path(__file__).with_name("matrix_echo.py"))]
        return subprocess.Popen(
            [*echo, server.url, bot.user_id, bot.token, str(LATENCY)], text=True
        )
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


async def replies_seen(
    watch: AsyncClient, bot: str, rooms: set[str], since: str
) -> tuple[str, int]:
    """Sync as the bot until it has sent a message into each of `rooms`: the next token, and
    how many syncs it took (the bot's account made them: not the bot's own requests)."""
    left, syncs = set(rooms), 0
    while left:
        found = await watch.sync(30_000, sync_filter=WATCH_FILTER, since=since)
        syncs += 1
        assert isinstance(found, SyncResponse), found
        since = found.next_batch
        for room, info in found.rooms.join.items():
            if any(e.sender == bot for e in info.timeline.events):
                left.discard(room)
    return since, syncs


async def quiet(log: AccessLog, bot: str) -> Requests:
    """The bot's requests until it asks nothing but syncs for QUIET_S (at most a minute)."""
    found, calm = Requests(), 0.0
    deadline = time.monotonic() + 60
    while calm < QUIET_S and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        more = log.read(bot)
        found.count.update(more.count)
        found.cpu_s.update(more.cpu_s)
        busy = sum(n for kind, n in more.count.items() if kind != "sync")
        calm = 0.0 if busy else calm + 0.5
    return found


async def bursts(kind: str, args: argparse.Namespace, tmp: Path, model_url: str) -> list[Burst]:
    """A new Synapse, its people and their DMs with the bot, then the bursts."""
    where = Path(tempfile.mkdtemp(dir=args.synapse_dir or tmp))
    server = Synapse(where, json.loads(args.synapse)).start()
    process = None
    try:
        bot = server.register("bot")
        people = [server.register(f"person{n}") for n in range(args.chats)]
        home = Path(tempfile.mkdtemp(dir=tmp)) / "home"
        extra = dict(item.split("=", 1) for item in args.env)
        process = start_bot(kind, home, model_url, server, bot, people[0].user_id, extra)
        clients = [client(server, p) for p in people]
        rooms = []
        for person in clients:
            made = await person.room_create(invite=[bot.user_id], is_direct=True)
            rooms.append(made.room_id)  # type: ignore[union-attr]
        watch = client(server, bot)
        joined = await watch.sync(0, sync_filter=WATCH_FILTER)
        assert isinstance(joined, SyncResponse)
        since = joined.next_batch
        while not await all_joined(clients, rooms, bot.user_id):
            await asyncio.sleep(0.5)
        # A warm-up turn loads what is lazy.
        await clients[0].room_send(rooms[0], "m.room.message", {"msgtype": "m.text", "body": "hi"})
        since, _ = await replies_seen(watch, bot.user_id, {rooms[0]}, since)
        log = AccessLog(server.folder / "synapse.log")
        await quiet(log, bot.user_id)
        found = []
        for _ in range(args.runs):
            log.skip()
            synapse_cpu = bench_gateway.cpu_seconds(server.pid)
            bot_cpu = bench_gateway.cpu_seconds(process.pid)
            started = time.perf_counter()
            body = {"msgtype": "m.text", "body": "hello there"}
            await asyncio.gather(
                *(
                    c.room_send(r, "m.room.message", body)
                    for c, r in zip(clients, rooms, strict=True)
                )
            )
            sent = time.perf_counter() - started
            since, syncs = await replies_seen(watch, bot.user_id, set(rooms), since)
            wall = time.perf_counter() - started
            asked = await quiet(log, bot.user_id)
            asked.count["sync"] -= syncs
            found.append(
                Burst(
                    wall,
                    sent,
                    bench_gateway.cpu_seconds(server.pid) - synapse_cpu,
                    bench_gateway.cpu_seconds(process.pid) - bot_cpu,
                    asked,
                )
            )
            print(
                f"{kind}: the people's {len(rooms)} messages stored by Synapse in {sent:.3f} s, "
                f"every reply seen at {wall:.3f} s",
                file=sys.stderr,
            )
        for c in [*clients, watch]:
            await c.close()
        return found
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=60)
        server.stop()
        shutil.rmtree(where, ignore_errors=True)


def per_message(bursts: list[Burst], chats: int, *, cpu: bool = False) -> dict[str, float]:
    """Requests per message by kind, or Synapse's CPU milliseconds on them."""
    total: Counter[str] = Counter()
    for burst in bursts:
        total.update(burst.requests.cpu_s if cpu else burst.requests.count)
    scale = 1000 if cpu else 1
    return {kind: scale * total[kind] / (chats * len(bursts)) for kind in KINDS}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--chats", type=int, default=100)
    parser.add_argument("--env", action="append", default=[], help="extra KEY=VALUE settings")
    parser.add_argument("--only", choices=sorted(LABELS), help="measure one bot, not both")
    parser.add_argument("--synapse", default="{}", help="JSON merged into homeserver.yaml")
    parser.add_argument("--synapse-dir", help="where Synapse keeps its database")
    args = parser.parse_args()
    kinds = [args.only] if args.only else ["floor", "gateway"]
    measured: dict[str, list[Burst]] = {}
    with tempfile.TemporaryDirectory() as tmp, _common.ModelServer(LATENCY) as model:
        for kind in kinds:
            measured[kind] = asyncio.run(bursts(kind, args, Path(tmp), model.base_url))
        with FakeTelegram() as telegram:
            plain = SimpleNamespace(chats=args.chats, runs=args.runs, env=[], profile=None)
            telegram_walls = [
                w
                for w, _ in bench_gateway.session(
                    Path(tmp), model.base_url, telegram, plain, _common.REPO
                )
            ]
    base = _common.median(telegram_walls)
    walls = {kind: _common.median([b.wall for b in found]) for kind, found in measured.items()}
    settings = ", ".join([*args.env, *([args.synapse] if args.synapse != "{}" else [])])
    print(
        f"### {args.chats} DMs at once, model latency {LATENCY * 1000:.0f} ms, "
        f"{settings or 'default settings'}\n"
    )
    rows = []
    for kind, found in measured.items():
        median = _common.median
        rows.append(
            [
                LABELS[kind],
                f"{walls[kind]:.3f}",
                ", ".join(f"{b.wall:.3f}" for b in found),
                f"{walls[kind] / base:.2f}×",
                f"{median([b.sent for b in found]):.3f}",
                f"{median([b.synapse_cpu for b in found]):.2f}",
                f"{median([b.bot_cpu for b in found]):.2f}",
            ]
        )
    runs = ", ".join(f"{w:.3f}" for w in telegram_walls)
    rows.append(["telegram (loopback Bot API)", f"{base:.3f}", runs, "1.00×", "", "", ""])
    headers = ["answered by", "wall s (median)", "wall s (runs)", "× Telegram"]
    headers += ["people's sends s", "Synapse CPU s", "bot CPU s"]
    print(_common.table(headers, rows))
    counts = {kind: per_message(found, args.chats) for kind, found in measured.items()}
    cpus = {kind: per_message(found, args.chats, cpu=True) for kind, found in measured.items()}
    shown = [k for k in KINDS if any(c[k] for c in counts.values())]
    print("\nThe bot's requests to Synapse per message, and Synapse's CPU ms on them (the")
    print("watcher's syncs are left out of the counts, not of the sync's CPU):\n")
    rows = [
        [LABELS[kind], *(f"{c[k]:.2f}" for k in shown), f"{sum(c.values()):.2f}"]
        for kind, c in counts.items()
    ]
    rows += [
        [f"{LABELS[kind]}, CPU ms", *(f"{c[k]:.1f}" for k in shown), f"{sum(c.values()):.1f}"]
        for kind, c in cpus.items()
    ]
    print(_common.table(["bot", *shown, "all"], rows))
    if "gateway" not in walls:
        return 0
    ratio = walls["gateway"] / base
    ok = ratio <= RATIO
    print(f"\n{_common.verdict(ok)}: the gateway {ratio:.2f}× Telegram's wall (≤ {RATIO}×)")
    if not ok and "floor" in walls and walls["floor"] / base > RATIO:
        share = walls["gateway"] / walls["floor"]
        ok = share <= FLOOR_RATIO
        print(
            f"Synapse's floor alone is {walls['floor'] / base:.2f}× Telegram's: "
            f"{_common.verdict(ok)}: the gateway {share:.2f}× the floor (≤ {FLOOR_RATIO}×)"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
