"""Linux process controls nanomem sets on itself (no-ops elsewhere)."""

from __future__ import annotations

import ctypes
import signal
import sys

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36


def prctl(option: int, value: int) -> bool:
    """True when the kernel accepted it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def hide_environment() -> bool:
    """Not dumpable: /proc/<our pid>/environ (our keys), mem and the like become root's, so
    another process of the same user, such as a shell command, cannot read them, nor attach a
    debugger. Root is not stopped by it; the sandbox hides our processes from commands."""
    return prctl(PR_SET_DUMPABLE, 0)


def adopt_orphans() -> bool:
    """Child subreaper: what a killed child leaves running becomes our child, not init's."""
    return prctl(PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent() -> bool:
    """SIGKILLed when the process that started this one dies, however it dies."""
    return prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
