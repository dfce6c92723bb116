"""Without the sandbox, a command runs as our own user and can kill its reaper with SIGKILL;
what it started (`setsid sh -c 'sleep 300' &`) would then live on. nanomem is therefore a child
subreaper while it runs commands this way: such leftovers become nanomem's children, and after
each command every child nanomem adopted since that command started is killed, with all it
started.

Every child nanomem starts itself (a command's reaper, an MCP server's) starts under
`spawn_lock()` and is in `own_children` while it runs: a sweep never takes it for a leftover."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import weakref
from collections.abc import Collection
from pathlib import Path

# Forks may race the listing; a killed process hands its children up: repeat until quiet.
ROUNDS = 100
SETTLE_S = 0.01
REAPER = Path(__file__).with_name("reaper.py")  # run as a script: see its docstring

own_children: set[int] = set()  # the children we started ourselves that still run
# Per event loop: nothing starts while a sweep runs, so every child the sweep finds that is
# not in `own_children` is a leftover of the command that ended, never another chat's new command.
_spawning: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


def spawn_lock() -> asyncio.Lock:
    return _spawning.setdefault(asyncio.get_running_loop(), asyncio.Lock())


def start_ticks(pid: int) -> int | None:
    """When a process started (clock ticks after boot); None when it is gone."""
    fields = _stat(pid)
    return int(fields[19]) if fields else None


def sweep(since: int, keep: Collection[int]) -> int:
    """Blocking. Kills our children that started at or after `since` and are not in `keep`
    (the processes we started ourselves and that still run), with their descendants; returns
    how many processes it killed."""
    me = os.getpid()
    killed = 0
    for _ in range(ROUNDS):
        table = _table()
        adopted = [
            pid
            for pid, (parent, started) in table.items()
            if parent == me and started >= since and pid not in keep
        ]
        if not adopted:
            break
        for pid in [*adopted, *_descendants(table, adopted)]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        time.sleep(SETTLE_S)  # let the kernel finish them, then collect our own
        for pid in adopted:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
    return killed


def kill_children() -> int:
    """Blocking. Kills every child process of ours with all it started, however it was
    started (a shell command's reaper, an MCP server): for a process leaving at once, so
    none of them outlives it. How many processes it killed."""
    return sweep(0, ())


def _stat(pid: int) -> list[bytes] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: the fields follow the last ")".
    return raw[raw.rfind(b")") + 2 :].split()


def _table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, start ticks) of every process we can see."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))):
            table[int(entry.name)] = (int(fields[1]), int(fields[19]))
    return table


def _descendants(table: dict[int, tuple[int, int]], roots: list[int]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found, todo = [], list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found
