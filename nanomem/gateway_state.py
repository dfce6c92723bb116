"""Whether a gateway runs on a home, read without disturbing it: the home's `gateway` lock is
held (a flock, gone with its process) and gateway.json beside it says its pid and port. Held
and written by gateway/claim.py; asked by `nanomem status` and by a chat that leaves work for
the gateway (a reminder made in the terminal)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from nanomem.home import Home
from nanomem.locks import LockBusy


@dataclass(frozen=True)
class Running:
    """The gateway that holds a home; pid or port None while it has not written them yet."""

    pid: int | None
    port: int | None

    def describe(self) -> str:
        pid = "unknown" if self.pid is None else str(self.pid)
        port = "not open yet" if not self.port else str(self.port)
        return f"pid {pid}, port {port}"


def running(home: Home) -> Running | None:
    """The gateway running on this home, if one does (read without disturbing it)."""
    if not home.locks.is_dir():
        return None
    lock = home.lock("gateway")
    try:
        lock.acquire_sync(wait_s=0)
    except LockBusy:
        return announced(home)
    lock.release()
    return None


def announced(home: Home) -> Running:
    try:
        state = json.loads(home.gateway.read_text(encoding="utf-8"))
        pid, port = state.get("pid"), state.get("port")
    except (OSError, ValueError, AttributeError):  # not written yet, or by hand
        return Running(None, None)
    return Running(pid if isinstance(pid, int) else None, port if isinstance(port, int) else None)
