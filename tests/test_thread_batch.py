"""ThreadBatch: blocking calls in a worker thread, those queued meanwhile together, in order."""

from __future__ import annotations

import asyncio
import threading

import pytest

from nanomem.thread_batch import ThreadBatch


async def test_calls_queued_while_a_batch_runs_go_together_in_their_order() -> None:
    batch, ran, threads = ThreadBatch(), list[int](), list[int]()
    first_started, release = threading.Event(), threading.Event()

    def call(n: int) -> int:
        if n == 0:
            first_started.set()
            release.wait(30)  # a safety net
        ran.append(n)
        threads.append(threading.get_ident())
        return n * 10

    first = asyncio.ensure_future(batch.run(call, 0))
    await asyncio.to_thread(first_started.wait, 30)
    rest = [asyncio.ensure_future(batch.run(call, n)) for n in (1, 2, 3)]
    release.set()
    assert await asyncio.gather(first, *rest) == [0, 10, 20, 30]
    assert ran == [0, 1, 2, 3]
    assert len(set(threads[1:])) == 1  # the three that waited shared one hop


async def test_each_caller_gets_its_own_calls_error() -> None:
    batch = ThreadBatch()

    def call(n: int) -> int:
        if n == 1:
            raise ValueError("one")
        return n

    results = await asyncio.gather(*(batch.run(call, n) for n in range(3)), return_exceptions=True)
    assert results[0] == 0 and results[2] == 2
    assert isinstance(results[1], ValueError) and str(results[1]) == "one"


async def test_a_cancelled_caller_leaves_the_others_their_results() -> None:
    batch, release = ThreadBatch(), threading.Event()
    first = asyncio.ensure_future(batch.run(release.wait, 30))
    second = asyncio.ensure_future(batch.run(lambda: "second"))
    third = asyncio.ensure_future(batch.run(lambda: "third"))
    await asyncio.sleep(0)  # all three queued
    second.cancel()
    release.set()
    assert await first is True and await third == "third"
    with pytest.raises(asyncio.CancelledError):
        await second


def test_a_batch_serves_one_loop_after_another() -> None:
    batch = ThreadBatch()
    assert asyncio.run(batch.run(lambda: 1)) == 1
    assert asyncio.run(batch.run(lambda: 2)) == 2
