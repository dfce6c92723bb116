"""The home's file locks: exclusive across processes, gone with a killed holder, never
blocking the event loop."""

import asyncio
import os
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from nanomem.locks import FileLock, LockBusy, in_thread_holding
from tests.helpers import until

HOLDER = """
import sys
from pathlib import Path
from nanomem.locks import FileLock
lock = FileLock(Path(sys.argv[1]))
lock.acquire_sync()
print("held", flush=True)
sys.stdin.read()  # until the test closes stdin (or kills us)
lock.release()
print("released", flush=True)
"""


def hold_in_another_process(path: Path) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


def test_another_process_holding_it_makes_a_try_fail_and_a_kill_frees_it(tmp_path: Path) -> None:
    path = tmp_path / "locks" / "dream.lock"
    child = hold_in_another_process(path)
    lock = FileLock(path)
    with pytest.raises(LockBusy):
        lock.acquire_sync(wait_s=0)
    with pytest.raises(LockBusy):
        lock.acquire_sync(wait_s=0.2)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    lock.acquire_sync(wait_s=0)  # no stale lock after kill -9
    assert lock.held
    lock.release()
    assert not lock.held


async def test_waiting_for_another_process_never_blocks_the_loop(tmp_path: Path) -> None:
    path = tmp_path / "locks" / "history.lock"
    child = hold_in_another_process(path)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(tick())
    waiter = asyncio.create_task(FileLock(path).acquire())
    await until(lambda: ticks >= 20)  # the loop keeps running while the lock is waited for
    assert not waiter.done()
    assert child.stdin is not None
    child.stdin.close()  # the holder releases
    await asyncio.wait_for(waiter, 30)
    ticker.cancel()
    child.wait(timeout=30)
    assert try_in_another_process(path) == "busy"  # now we hold it


def try_in_another_process(path: Path) -> str:
    result = subprocess.run(
        [sys.executable, "-c", TRY, str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=60,
    )
    return result.stdout.strip()


TRY = """
import sys
from pathlib import Path
from nanomem.locks import FileLock, LockBusy
try:
    FileLock(Path(sys.argv[1])).acquire_sync(wait_s=0)
    print("got it")
except LockBusy:
    print("busy")
"""


async def test_tasks_and_threads_of_one_process_exclude_each_other(tmp_path: Path) -> None:
    lock = FileLock(tmp_path / "x.lock")
    await lock.acquire()
    with pytest.raises(LockBusy):
        await lock.acquire(wait_s=0)
    with pytest.raises(LockBusy):  # a second object on the same file, as another module would
        await FileLock(tmp_path / "x.lock").acquire(wait_s=0)
    with pytest.raises(LockBusy):
        await asyncio.to_thread(lock.acquire_sync, 0)
    lock.release()
    await asyncio.to_thread(lock.acquire_sync, 0)
    lock.release()


def test_sync_holds_are_reentrant_within_a_thread(tmp_path: Path) -> None:
    lock = FileLock(tmp_path / "memory.lock")
    with lock.hold_sync(), lock.hold_sync():
        assert lock.held
        other: list[BaseException] = []

        def elsewhere() -> None:
            try:
                lock.acquire_sync(wait_s=0)
            except LockBusy as exc:
                other.append(exc)

        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
        assert len(other) == 1  # another thread is not let in
        assert lock.held
    assert not lock.held


async def test_a_cancelled_writer_keeps_the_lock_until_its_thread_is_done(tmp_path: Path) -> None:
    lock = FileLock(tmp_path / "h.lock")
    release = threading.Event()
    task = asyncio.create_task(in_thread_holding(lock, release.wait, 30))
    await until(lambda: lock.held)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert lock.held  # the write in the thread still runs
    release.set()
    await lock.acquire(wait_s=30)
    lock.release()


def test_lock_files_are_private(tmp_path: Path) -> None:
    path = tmp_path / "home" / "locks" / "sessions" / "cli_direct.lock"
    with FileLock(path).hold_sync():
        pass
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o700
