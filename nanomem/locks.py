"""Locks across processes on one home: `fcntl.flock` on files under `<home>/locks/`.

A flock belongs to an open file and vanishes when its process dies, so a SIGKILL never leaves
a stale lock behind. Each `FileLock` also excludes the threads and tasks of its own process (a
flock alone would let two holders in one process share it). Async forms poll with LOCK_NB and
short sleeps, so waiting never blocks the event loop nor occupies a worker thread; sync forms
are for code already running in a worker thread, and are re-entrant within that thread.
`KeyedLocks` are the in-process kind: one asyncio lock per key.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import threading
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
_FIRST_POLL_S = 0.002
_MAX_POLL_S = 0.05


class LockBusy(Exception):
    """The lock was not free (a try-lock), or not within the timeout."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"{path.name} is held by another process or task")
        self.path = path


class FileLock:
    """One named lock; `wait_s=None` waits for ever, `0` only tries once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._guard = threading.Lock()  # holders within this process
        self._fd: int | None = None
        self._owner: int | None = None  # the thread of a sync holder, for re-entry
        self._depth = 0

    @property
    def held(self) -> bool:
        """Held by this process (any thread or task)."""
        return self._fd is not None

    # -- async: never blocks the loop -------------------------------------------------------

    async def acquire(self, wait_s: float | None = None) -> None:
        deadline = None if wait_s is None else time.monotonic() + wait_s
        pause = _FIRST_POLL_S
        while not self._try(owner=None):
            if deadline is not None and time.monotonic() >= deadline:
                raise LockBusy(self.path)
            await asyncio.sleep(pause)
            pause = min(pause * 2, _MAX_POLL_S)

    def release(self) -> None:
        if self._depth > 1:
            self._depth -= 1
            return
        fd, self._fd, self._owner, self._depth = self._fd, None, None, 0
        if fd is not None:
            os.close(fd)  # closing the file drops the flock
        self._guard.release()

    # -- sync: for worker threads -----------------------------------------------------------

    def acquire_sync(self, wait_s: float | None = None) -> None:
        me = threading.get_ident()
        if self._owner == me:
            self._depth += 1
            return
        deadline = None if wait_s is None else time.monotonic() + wait_s
        pause = _FIRST_POLL_S
        while not self._try(owner=me):
            if deadline is not None and time.monotonic() >= deadline:
                raise LockBusy(self.path)
            time.sleep(pause)
            pause = min(pause * 2, _MAX_POLL_S)

    @contextmanager
    def hold_sync(self, wait_s: float | None = None) -> Iterator[None]:
        self.acquire_sync(wait_s)
        try:
            yield
        finally:
            self.release()

    # -- the one attempt both forms make ----------------------------------------------------

    def _try(self, owner: int | None) -> bool:
        if not self._guard.acquire(blocking=False):
            return False
        try:
            fd = self._open()
        except BaseException:
            self._guard.release()
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            self._guard.release()
            return False
        except BaseException:
            os.close(fd)
            self._guard.release()
            raise
        self._fd, self._owner, self._depth = fd, owner, 1
        return True

    def _open(self) -> int:
        """The lock file, private to its owner; opened anew for every hold (never inherited by
        child processes: Python's descriptors are close-on-exec)."""
        missing = []
        folder = self.path.parent
        while not folder.is_dir():
            missing.append(folder)
            folder = folder.parent
        for each in reversed(missing):  # parents too: `mkdir(parents=True)` ignores the mode
            each.mkdir(mode=0o700, exist_ok=True)
        return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)


async def in_thread_holding(lock: FileLock, fn: Callable[..., T], *args: Any) -> T:
    """Run blocking `fn` in a worker thread while holding `lock` (waiting for it without a
    thread). If the caller is cancelled, the lock is still released only when `fn` has
    finished: a writer cut loose mid-write must not let the next one in."""
    await lock.acquire()
    try:
        work = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    except BaseException:
        lock.release()
        raise
    work.add_done_callback(lambda _: lock.release())
    return await asyncio.shield(work)


async def to_thread_to_the_end(fn: Callable[..., T], *args: Any) -> T:
    """Run blocking `fn` in a worker thread; if the caller is cancelled, wait for `fn` to
    finish before passing the cancellation on, so a lock held around it is never released
    while it still writes."""
    work = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        await work
        raise


class KeyedLocks:
    """One lock per session key, forgotten when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: defaultdict[str, int] = defaultdict(int)

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(key, asyncio.Lock())
        self._users[key] += 1
        try:
            async with lock:
                yield
        finally:
            self._users[key] -= 1
            if not self._users[key]:
                del self._users[key], self._locks[key]
