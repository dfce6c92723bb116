"""Time from the first streamed piece of a reply to the first text a Telegram chat shows.

The real TelegramChannel (python-telegram-bot over HTTP) runs against the loopback Bot API;
its outbox is pumped as in the gateway, and the turn's start, its pieces (the step's text so
far, one every 20 ms for half a second), the reply and the turn's end are published on the bus
as the core publishes them.
Measured: from publishing the first piece to the fake receiving the first draft
(`sendMessageDraft`), or, on a Bot API server without drafts, the first message that is then
edited in place. Each run is a new private chat; rows for one chat at a time and for 10
chats streaming at once. Median over the runs; target ≤ 300 ms.

    python tests/benchmarks/bench_stream_telegram.py [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import _common  # before any nanomem import: repository root on sys.path, litellm offline
from loguru import logger

from channels.telegram.channel import TelegramChannel
from nanomem.agent.bus import InboundMessage, MessageBus
from nanomem.agent.channel import pump_outbound
from nanomem.agent.outbound import Delta, OutboundMessage, Text, TurnEnded, TurnStarted
from nanomem.config import TelegramSettings
from tests.fakes.telegram_server import FakeTelegram

TARGET_MS = 300.0
PIECES, PAUSE = 25, 0.02
WORDS = "Here is **a reply** that the model writes piece by piece, with `code` too. "


class Bench:
    def __init__(self, fake: FakeTelegram, channel: TelegramChannel, bus: MessageBus) -> None:
        self.fake, self.channel, self.bus = fake, channel, bus
        self.next_chat = 1

    async def ask(self, count: int) -> list[InboundMessage]:
        chats = list(range(self.next_chat, self.next_chat + count))
        self.next_chat += count
        for chat in chats:
            self.fake.send_text(chat, "hello")
        asked = [await asyncio.wait_for(self.bus.next_inbound(), 30) for _ in chats]
        for msg in asked:  # as the core tells the channel once it begins on a message
            await self.bus.publish_outbound(OutboundMessage.answering(msg, TurnStarted()))
        await asyncio.sleep(0.05)  # let the typing indicators go out first, as in real use
        return asked

    async def first_visible(self, msg: InboundMessage, drafts: bool) -> float:
        """Stream one reply; ms from its first piece to the first text the chat got."""
        chat = int(msg.chat_id)
        shown = asyncio.create_task(asyncio.to_thread(self._first_message_at, chat))
        started, so_far = time.monotonic(), ""
        for n in range(PIECES):
            so_far += f"{WORDS}({n}) "
            piece = OutboundMessage.answering(msg, Delta(WORDS, so_far, 0))
            await self.bus.publish_outbound(piece)
            await asyncio.sleep(PAUSE)
        await self.bus.publish_outbound(OutboundMessage.answering(msg, Text(so_far)))
        await self.bus.publish_outbound(OutboundMessage.answering(msg, TurnEnded()))
        first_message = await shown
        at = self.fake.drafts(chat)[0]["at"] if drafts else first_message
        return (at - started) * 1000

    def _first_message_at(self, chat: int) -> float:
        self.fake.wait_for_messages(chat, 1, timeout=30)  # woken the moment it is recorded
        return time.monotonic()

    async def run(self, chats: int, drafts: bool) -> list[float]:
        asked = await self.ask(chats)
        return list(await asyncio.gather(*(self.first_visible(m, drafts) for m in asked)))


async def measure(runs: int, workspace: Path) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {}
    for drafts in (True, False):
        with FakeTelegram() as fake:
            fake.set_drafts_known(drafts)
            settings = TelegramSettings.model_validate(
                {"enabled": True, "token": fake.token, "allow_from": ["*"]}
                | {"base_url": fake.base_url, "base_file_url": fake.base_file_url}
            )
            channel = TelegramChannel(settings, workspace=workspace, commands=[])
            bus = MessageBus()
            await channel.start(bus)
            pump = asyncio.create_task(pump_outbound(channel, bus))
            bench = Bench(fake, channel, bus)
            try:
                await bench.run(1, drafts)  # warm-up: connections, first renders
                way = "draft" if drafts else "message (no drafts)"
                results[f"1 chat, first {way}"] = [
                    (await bench.run(1, drafts))[0] for _ in range(runs)
                ]
                results[f"10 chats at once, first {way}"] = await bench.run(10, drafts)
            finally:
                pump.cancel()
                await asyncio.gather(pump, return_exceptions=True)
                await channel.stop()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    logger.remove()  # the channel's log lines would interleave with the table
    with tempfile.TemporaryDirectory() as tmp:
        results = asyncio.run(measure(args.runs, Path(tmp)))
    rows, ok = [], True
    for name, values in results.items():
        med = _common.median(values)
        ok = ok and med <= TARGET_MS
        worst = max(values)
        rows.append([name, len(values), f"{med:.1f}", f"{worst:.1f}", f"≤ {TARGET_MS:.0f} ms"])
    every = f"pieces every {PAUSE * 1000:.0f} ms"
    print(f"### Telegram: first streamed piece → first text shown ({every})\n")
    print(_common.table(["what", "runs", "median ms", "max ms", "target"], rows))
    print(f"\n{_common.verdict(ok)}: every median ≤ {TARGET_MS:.0f} ms")
    print("(The fake Bot API runs in a thread of this process; its CPU is charged here too.)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
