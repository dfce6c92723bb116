"""Small blocking calls run in a worker thread together: the calls that queue while one batch
runs go in the next, in the order they came.

A hop to a worker thread costs ~40-70 us of CPU (a future, a condition, waking the thread and
then the loop); a hundred chats answered at once make hundreds of hops for calls that take a
few microseconds each (marking inbox rows, checking the prompt's files). Batched, the first
call goes at once, as alone, and a burst shares a few hops.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
_Outcome = tuple[bool, Any]  # (returned, its value or the exception raised)


class ThreadBatch:
    """One queue of calls for a worker thread, worked off by one task of the running loop."""

    def __init__(self) -> None:
        self._queue: list[tuple[Callable[[], Any], asyncio.Future[Any]]] = []
        self._worker: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in a worker thread, with whatever else is queued. Cancelling the caller
        does not stop the call (no more than asyncio.to_thread does)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new loop (a test's, a restart): nothing carries over
            self._queue, self._worker, self._loop = [], None, loop
        future: asyncio.Future[T] = loop.create_future()
        self._queue.append((functools.partial(fn, *args), future))
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._work(), name="thread-batch")
        return await future

    async def _work(self) -> None:
        batch: list[tuple[Callable[[], Any], asyncio.Future[Any]]] = []
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                outcomes = await asyncio.to_thread(_each, [call for call, _ in batch])
                for (_, future), (returned, value) in zip(batch, outcomes, strict=True):
                    if future.done():  # its caller was cancelled; the call ran all the same
                        continue
                    if returned:
                        future.set_result(value)
                    else:
                        future.set_exception(value)
                batch = []
        except BaseException:  # the worker was cancelled (a shutdown): no caller waits forever
            for _, future in [*batch, *self._queue]:
                future.cancel()
            self._queue = []
            raise


def _each(calls: list[Callable[[], Any]]) -> list[_Outcome]:
    outcomes: list[_Outcome] = []
    for call in calls:
        try:
            outcomes.append((True, call()))
        except Exception as exc:  # each caller gets its own call's error
            outcomes.append((False, exc))
    return outcomes
