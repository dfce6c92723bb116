"""Runs Dream every dream.interval_h hours (APScheduler), and early when history piles up.

The last run time is persisted by Dream, so a gateway that restarts often still dreams on
schedule instead of restarting its timer from zero."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta
from typing import Any

from loguru import logger

from nanomem.config import DreamSettings
from nanomem.features.dream.dream import Dream, DreamBusy
from nanomem.memory import HistoryStore


class DreamScheduler:
    def __init__(
        self,
        dream: Dream,
        history: HistoryStore,
        settings: DreamSettings,
        *,
        backlog_check_s: float = 300,
        startup_delay_s: float = 30,
    ) -> None:
        self.dream = dream
        self.history = history
        self.settings = settings
        self.backlog_check_s = backlog_check_s
        self.startup_delay_s = startup_delay_s
        self._scheduler: Any = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if not self.settings.enabled:
            logger.info("dream: disabled (dream.enabled = false)")
            return
        from apscheduler.schedulers.asyncio import AsyncIOScheduler

        scheduler = AsyncIOScheduler(timezone=UTC)
        scheduler.add_job(
            self._launch,
            "interval",
            args=["schedule"],
            hours=self.settings.interval_h,
            next_run_time=self.first_run(),
            id="dream",
            max_instances=1,
            coalesce=True,
            misfire_grace_time=None,
        )
        scheduler.add_job(
            self._check_backlog,
            "interval",
            seconds=self.backlog_check_s,
            id="dream-backlog",
            max_instances=1,
            coalesce=True,
        )
        scheduler.start()
        self._scheduler = scheduler

    def first_run(self) -> datetime:
        """One interval after the last run, persisted; at once (after a short delay) if overdue."""
        now = datetime.now(UTC)
        soonest = now + timedelta(seconds=self.startup_delay_s)
        last = (self.dream.last_run() or {}).get("last_run")
        if not last:
            return soonest
        every = timedelta(hours=self.settings.interval_h)
        try:
            due = datetime.fromisoformat(last) + every
            due = max(due, soonest)  # TypeError without an offset
        except (TypeError, ValueError, OverflowError):  # dream.json edited by hand, say
            logger.warning("dream: dream.json's last_run {!r} is unreadable", str(last)[:40])
            return soonest
        # A last run in the future (a clock set back, a hand edit) must not put Dream off for
        # longer than one interval: at the year 9999 it never ran again.
        return min(due, now + every)

    @property
    def next_run(self) -> datetime | None:
        job = self._scheduler.get_job("dream") if self._scheduler else None
        return job.next_run_time if job else None

    async def _check_backlog(self) -> None:
        # Both cursors fresh from their files: other processes append and dream too.
        waiting = await asyncio.to_thread(
            lambda: self.history.last_cursor() - self.history.dream_cursor()
        )
        if waiting >= self.settings.trigger_entries:
            await self._launch("backlog")

    async def _launch(self, trigger: str) -> None:
        """Start a run as our own task, so stopping the scheduler never cancels one midway."""
        if self.dream.running or (self._task is not None and not self._task.done()):
            return
        self._task = asyncio.create_task(self._run(trigger), name=f"dream-{trigger}")

    async def _run(self, trigger: str) -> None:
        try:
            await self.dream.run(
                trigger, lambda phase: logger.info("dream ({}): {}", trigger, phase)
            )
        except DreamBusy:
            pass
        except Exception:
            logger.exception("dream ({}) failed", trigger)

    async def stop(self, grace_s: float = 30) -> None:
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
            self._scheduler = None
        if self._task is not None and not self._task.done():
            done, _ = await asyncio.wait({self._task}, timeout=grace_s)
            if not done:
                self._task.cancel()  # Dream rolls its files back when cancelled
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
