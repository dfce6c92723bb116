"""Parsers of untrusted bytes run in a child process that can be stopped.

A parser in a thread cannot be stopped: a PDF built to keep it busy for an hour holds a
thread (and a core) for an hour, through /stop and shutdown alike. Here the parser is a
module run as `python -I -m <module> <config>`: it reads the bytes on stdin and writes
JSON lines on stdout. It limits itself (`confine`: CPU time, address space, no core file,
death with nanomem) before it reads a byte; the parent holds the wall clock, reads at most
`max_output_bytes`, and kills its process group at the limit, when the caller is cancelled
(/stop), and at shutdown (`stop_all`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nanomem.tools.confine import MEMORY_EXIT
from nanomem.tools.orphans import own_children, spawn_lock

if TYPE_CHECKING:
    from nanomem.pools import Pool

CHUNK = 65536
DRAIN_S = 5.0  # a killed child's pipe, read to its end: a grandchild may still hold it
_running: dict[int, asyncio.subprocess.Process] = {}
_shut: set[int] = set()  # children stop_all killed


@dataclass(frozen=True)
class ChildLimits:
    timeout_s: float  # wall clock, from its start; its CPU time is held to about the same
    memory_mb: int  # address space
    max_output_bytes: int


@dataclass(frozen=True)
class Ended:
    lines: list[dict[str, Any]]  # each complete JSON line it wrote, in order
    # Why it was stopped before its end: "time", "memory", "output", "shutdown", "crashed";
    # None when it finished by itself.
    stopped: str | None


async def run_isolated(
    module: str, config: dict[str, Any], data: bytes, limits: ChildLimits, pool: Pool
) -> Ended:
    """Run `module` on `data` in a confined child, one of `pool`'s at a time."""
    async with pool.slot():
        return await _run(module, config, data, limits)


async def _run(module: str, config: dict[str, Any], data: bytes, limits: ChildLimits) -> Ended:
    confined = {
        **config,
        "cpu_s": math.ceil(limits.timeout_s) + 1,
        "memory_mb": limits.memory_mb,
        "parent": os.getpid(),
    }
    async with spawn_lock():  # so the shell's orphan sweep never takes it for a leftover
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",  # none of the environment's PYTHON* variables, no user site, no cwd on the path
            "-m",
            module,
            json.dumps(confined),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env={"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8"},  # none of our keys
            start_new_session=True,
        )
        own_children.add(process.pid)
    _running[process.pid] = process
    output = bytearray()
    stopped: str | None = None
    try:
        feeding = asyncio.ensure_future(_feed(process, data))
        try:
            async with asyncio.timeout(limits.timeout_s):
                if not await _read(process, output, limits.max_output_bytes):
                    stopped = "output"
                else:
                    await process.wait()
        except TimeoutError:
            stopped = "time"
        finally:
            feeding.cancel()
    finally:
        _running.pop(process.pid, None)
        await _kill(process)  # on every path: cancelled (/stop) too
        own_children.discard(process.pid)
    if process.pid in _shut:
        _shut.discard(process.pid)
        stopped = "shutdown"
    elif stopped is None and process.returncode == MEMORY_EXIT:
        stopped = "memory"
    elif stopped is None and process.returncode not in (0, None):
        # SIGXCPU: its CPU time is up (it spent it faster than the wall clock)
        stopped = "time" if process.returncode == -signal.SIGXCPU else "crashed"
    return Ended(_lines(bytes(output)), stopped)


async def _feed(process: asyncio.subprocess.Process, data: bytes) -> None:
    assert process.stdin is not None
    with contextlib.suppress(ConnectionError):  # it may end (or be killed) before reading all
        process.stdin.write(data)
        await process.stdin.drain()
        process.stdin.close()


async def _read(process: asyncio.subprocess.Process, output: bytearray, limit: int) -> bool:
    """Its output into `output` until it closes it; False when it wrote more than `limit`."""
    assert process.stdout is not None
    while chunk := await process.stdout.read(CHUNK):
        output += chunk[: limit - len(output)]
        if len(output) >= limit:
            return False
    return True


async def _kill(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    # Reaped even when the caller is being cancelled: no zombie is left behind.
    await asyncio.shield(_reap(process))


async def _reap(process: asyncio.subprocess.Process) -> None:
    # What it wrote past the output limit is read and dropped: a full pipe pauses its reader,
    # which then never sees the end, and `wait` waits for that end too.
    assert process.stdout is not None
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(DRAIN_S):
            await drain(process.stdout)
    await process.wait()


async def drain(stream: asyncio.StreamReader) -> None:
    """Read a child's pipe to its end, keeping nothing."""
    while await stream.read(CHUNK):
        pass


def _lines(output: bytes) -> list[dict[str, Any]]:
    """The complete JSON lines: a line cut by a kill or the output limit is left out."""
    found = []
    for line in output.split(b"\n")[:-1]:
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            found.append(value)
    return found


def stop_all() -> None:
    """Kill every child still running (nanomem is stopping); their callers say so."""
    for pid in list(_running):
        _shut.add(pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def running() -> list[int]:
    """The pids of the children running now."""
    return list(_running)
