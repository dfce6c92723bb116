"""The floor for bench_matrix.py: an echo bot written directly on matrix-nio (no nanomem) that
joins every invite and answers each person's message after the model's latency, one sync at a
time, every reply sent at once. The gateway cannot beat what Synapse gives this.

    python tests/benchmarks/matrix_echo.py HOMESERVER USER_ID ACCESS_TOKEN LATENCY_S
"""

from __future__ import annotations

import asyncio
import sys

from nio import AsyncClient, SyncResponse


async def answer(bot: AsyncClient, room: str, latency: float) -> None:
    await asyncio.sleep(latency)
    await bot.room_send(room, "m.room.message", {"msgtype": "m.text", "body": "echo"})


async def main(homeserver: str, user_id: str, token: str, latency: float) -> None:
    bot = AsyncClient(homeserver, user_id)
    bot.access_token = token
    first = await bot.sync(0)
    assert isinstance(first, SyncResponse), first
    since = first.next_batch
    tasks: set[asyncio.Task[None]] = set()
    for room in first.rooms.invite:
        await bot.join(room)
    while True:
        found = await bot.sync(30_000, since=since)
        if not isinstance(found, SyncResponse):
            await asyncio.sleep(1)
            continue
        since = found.next_batch
        for room in found.rooms.invite:
            await bot.join(room)
        for room, info in found.rooms.join.items():
            for event in info.timeline.events:
                source = event.source if isinstance(event.source, dict) else {}
                if source.get("type") == "m.room.message" and event.sender != user_id:
                    task = asyncio.create_task(answer(bot, room, latency))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])))
