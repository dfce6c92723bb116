"""One gateway per home: two would poll the same bot and answer every message twice.

The gateway holds the home's `gateway` lock (a flock: it vanishes with the process, so a
SIGKILL leaves nothing stale) for its whole life, and beside it a small file with its pid and
port, for the second one's error and `nanomem status`."""

from __future__ import annotations

import json
import os

from nanomem.durable import atomic_write_text
from nanomem.gateway_state import Running, announced, running
from nanomem.home import Home
from nanomem.locks import FileLock, LockBusy

__all__ = ["AlreadyRunning", "Claim", "Running", "claim", "running"]

VERSION = 1
# `nanomem status` may hold the lock for an instant to look: a starting gateway waits that out.
CLAIM_WAIT_S = 1.0


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
        raise AlreadyRunning(announced(home)) from None
    held = Claim(home, lock)
    try:
        held.announce(port)
    except BaseException:
        lock.release()
        raise
    return held
