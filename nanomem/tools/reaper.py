"""Runs one shell command, or one program, as the root of its own process tree, then leaves
nothing behind.

Started by the shell tool as `python -I -S reaper.py PARENT_PID COMMAND` (standard library
only, nothing of nanomem imported) where the sandbox cannot run; by an MCP server's stdio
transport as `python -I -S reaper.py PARENT_PID -- PROGRAM ARG...` (run as is, no shell; its
standard streams are the reaper's). It makes itself a child
subreaper, so every descendant of the command, even one that called setsid() or was orphaned,
stays in its tree; when the command ends, or on SIGTERM (the tool's timeout, or nanomem's
death: the parent-death signal), it kills the whole tree and reaps it. The command itself dies
with the reaper (SIGKILL as its parent-death signal); what else survives a reaper the command
killed is nanomem's to sweep (nanomem/tools/orphans.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
TIMED_OUT = 124


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: the fields follow the last ")".
        fields = stat[stat.rfind(b")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def _kill_tree() -> None:
    # Forks may race the listing: repeat until the tree is empty.
    for _ in range(100):
        pids = _descendants(os.getpid())
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)  # let the kernel finish them, then collect them
        _reap()
    _reap()


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _on_term(signum: int, frame: object) -> None:
    _kill_tree()
    os._exit(TIMED_OUT)


def _prctl(option: int, value: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: descendants that stay attached are still found and killed


def main() -> int:
    signal.signal(signal.SIGTERM, _on_term)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # nanomem killed: the tree goes with it
    parent = int(sys.argv[1])
    # `-- PROGRAM ARG...`: that program itself; otherwise one shell command line.
    argv = sys.argv[3:] if sys.argv[2] == "--" else ["/bin/sh", "-c", sys.argv[2]]
    if os.getppid() != parent:
        return TIMED_OUT  # nanomem died before the signal was armed: run nothing
    reaper = os.getpid()
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the reaper killed: the command dies too
        if os.getppid() != reaper:
            os._exit(TIMED_OUT)
        try:
            os.execv(argv[0], argv)
        except OSError as exc:
            sys.stderr.write(f"cannot run {argv[0]}: {exc.strerror}\n")
            os._exit(127)
    _, status = os.waitpid(pid, 0)
    _kill_tree()  # what the command left running in the background goes with it
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
