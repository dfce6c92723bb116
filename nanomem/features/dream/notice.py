"""Telling the owner of a Dream change that waits for their decision (dream.review = "ask").

Background work of the Dream feature, given the owner outlet by whatever runs it (the gateway,
when one of its channels reaches the owner). A change prepared here or by a cron `nanomem
dream` in another process is found by looking every few seconds, told once, with Approve and
Reject buttons, and marked told under the Dream lock.
"""

from __future__ import annotations

import asyncio
import contextlib

from nanomem.agent import TellOwner, Text, keep_telling
from nanomem.features.dream.dream import Dream
from nanomem.locks import LockBusy

CHECK_S = 5.0  # how often a change waiting for the owner is looked for


class ReviewNotice:
    def __init__(self, dream: Dream, check_s: float = CHECK_S) -> None:
        self.dream, self.check_s = dream, check_s
        self._task: asyncio.Task[None] | None = None

    def start(self, tell: TellOwner) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(tell), name="dream-review-notice")

    async def stop(self) -> None:
        """A notice half sent is sent again at the next start: told twice rather than never."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self, tell: TellOwner) -> None:
        await keep_telling(self.check_s, "the Dream change", lambda: self.tell_once(tell))

    async def tell_once(self, tell: TellOwner) -> None:
        """Tell the owner of the waiting change unless they were told already."""
        pending = await asyncio.to_thread(self.dream.review.peek)
        if pending is None or pending.notified:
            return
        # Returns once delivered: a notice merely queued may be lost, and then nobody is told.
        # A decision made meanwhile makes its buttons answer "no longer waiting"; told twice
        # rather than never.
        await tell(Text(pending.describe(), buttons=pending.buttons()))
        try:  # under the Dream lock: a decision may be removing the change right now
            await self.dream.lock.acquire(wait_s=self.check_s)
        except LockBusy:
            return  # told again at the next check
        try:
            await asyncio.to_thread(self.dream.review.mark_notified, pending.id)
        finally:
            self.dream.lock.release()
