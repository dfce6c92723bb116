"""Token use as a feature: every answered model call written to usage.jsonl, and `/usage`."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING

from nanomem.agent import Command, Core, Feature, InboundMessage, Templates
from nanomem.audience import owner_alone
from nanomem.features.usage.ledger import Record, append
from nanomem.locks import FileLock, LockBusy, in_thread_holding
from nanomem.providers import ModelCall

if TYPE_CHECKING:
    from nanomem.features.usage.report import ChatUsage


class UsageMeter(Feature):
    name = "usage"

    def __init__(self, path: Path, lock: FileLock, templates: Templates) -> None:
        self.path, self.lock, self.templates = path, lock, templates

    async def after_call(self, call: ModelCall) -> None:
        # One line appended, never a read of the file, not fsynced (a power cut may cost a
        # count; an fsync would cost every call 2-5 ms). Written here, like a log line, when
        # the lock is free: ~50 µs, where the hop to a worker thread costs ~300 µs of CPU. The
        # hop is for a lock another process holds.
        records = [Record.of(call)]
        try:
            await self.lock.acquire(wait_s=0)
        except LockBusy:
            await in_thread_holding(self.lock, append, self.path, records)
            return
        try:
            append(self.path, records)
        finally:
            self.lock.release()

    def commands(self) -> list[Command]:
        summary = "token use: this chat's last turn, today, the last 7 days"
        return [Command("usage", summary, self.answer)]

    async def answer(self, msg: InboundMessage, args: str) -> str:
        chat = msg.session_key
        # The home's totals tell of the owner's other chats: never in a group, nor to others.
        home = owner_alone(msg.sender)
        usage = await asyncio.to_thread(self._read, chat, home)
        return self.render(chat, usage)

    def _read(self, chat: str, home: bool) -> ChatUsage:
        # Here, not at import: a turn never needs the price table or the sums.
        from nanomem.features.usage.prices import price_table
        from nanomem.features.usage.report import Pricing, chat_usage

        return chat_usage(self.path, chat, time.time(), Pricing(price_table()), home=home)

    def render(self, chat: str, usage: ChatUsage) -> str:
        return self.templates.render(
            "usage.md.j2",
            chat=chat,
            last_turn=usage.last_turn.describe() if usage.last_turn is not None else None,
            today=usage.today.describe(),
            week=usage.week.describe(),
            purposes=[(p, t.describe()) for p, t in sorted(usage.purposes.items())],
            home_today=usage.home_today.describe() if usage.home_today is not None else None,
            unpriced=sorted(model for model, priced in usage.models.items() if not priced),
            recorded=bool(usage.week.calls or (usage.home_today and usage.home_today.calls)),
        )


def build(core: Core) -> UsageMeter:
    return UsageMeter(core.home.usage, core.home.lock("usage"), core.templates)
