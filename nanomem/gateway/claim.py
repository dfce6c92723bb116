"""One gateway per home: two would poll the same bot and answer every message twice.

The gateway holds the home's `gateway` lock (a flock: it vanishes with the process, so a
SIGKILL leaves nothing stale) for its whole life, and beside it a small file with its pid and
port, for the second one's error and `nanomem status`."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from nanomem.durable import atomic_write_text
from nanomem.home import Home
from nanomem.locks import FileLock, LockBusy

VERSION = 1
# `nanomem status` may hold the lock for an instant to look: a starting gateway waits that out.
CLAIM_WAIT_S = 1.0


@dataclass(frozen=True)
class Running:
    """The gateway that holds a home; pid or port None while it has not written them yet."""

    pid: int | None
    port: int | None

    def describe(self) -> str:
        pid = "unknown" if self.pid is None else str(self.pid)
        port = "not open yet" if not self.port else str(self.port)
        return f"pid {pid}, port {port}"


class AlreadyRunning(Exception):
    def __init__(self, running: Running) -> None:
        stop = f"kill -TERM {running.pid}" if running.pid else "stop it"
        super().__init__(
            f"a gateway already runs on this home ({running.describe()}); {stop} before "
            "starting another, or give this one another --home"
        )
        self.running = running


class Claim:
    """This process's hold on the home as its gateway."""

    def __init__(self, home: Home, lock: FileLock) -> None:
        self.home, self._lock = home, lock

    def announce(self, port: int) -> None:
        """Say which port it listens on (0: not yet)."""
        state = {"version": VERSION, "pid": os.getpid(), "port": port}
        atomic_write_text(self.home.gateway, json.dumps(state) + "\n", mode=0o600)

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()

    def release(self) -> None:
        if self._lock.held:
            self.home.gateway.unlink(missing_ok=True)
            self._lock.release()


def claim(home: Home, port: int) -> Claim:
    """Become the home's gateway; AlreadyRunning when another process is."""
    lock = home.lock("gateway")
    try:
        lock.acquire_sync(wait_s=CLAIM_WAIT_S)
    except LockBusy:
        raise AlreadyRunning(_announced(home)) from None
    held = Claim(home, lock)
    try:
        held.announce(port)
    except BaseException:
        lock.release()
        raise
    return held


def running(home: Home) -> Running | None:
    """The gateway running on this home, if one does (read without disturbing it)."""
    if not home.locks.is_dir():
        return None
    lock = home.lock("gateway")
    try:
        lock.acquire_sync(wait_s=0)
    except LockBusy:
        return _announced(home)
    lock.release()
    return None


def _announced(home: Home) -> Running:
    try:
        state = json.loads(home.gateway.read_text(encoding="utf-8"))
        pid, port = state.get("pid"), state.get("port")
    except (OSError, ValueError, AttributeError):  # not written yet, or by hand
        return Running(None, None)
    return Running(pid if isinstance(pid, int) else None, port if isinstance(port, int) else None)
