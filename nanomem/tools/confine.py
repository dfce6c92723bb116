"""A confined child's side (tools/isolated.py runs it): its limits set on itself before it
reads a byte, its answer as JSON lines. Standard library only, and little of it: every
document read pays for what the child imports."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

from nanomem.tools.prctl import die_with_parent
from nanomem.tools.rlimits import apply as set_limits

MEMORY_EXIT = 3  # its exit code when it ran out of its address space


def confine() -> dict[str, Any]:
    """In the child, first: its config (argv[1]), with its limits set on itself (as a shell
    command's are: CPU time, then SIGXCPU and a SIGKILL a second later; address space; no
    core file) and killed when nanomem dies, however it dies (Linux)."""
    config: dict[str, Any] = json.loads(sys.argv[1])
    memory = int(config["memory_mb"]) * 2**20
    set_limits({"cpu": int(config["cpu_s"]), "as": memory, "core": 0})
    die_with_parent()
    if os.getppid() != int(config["parent"]):
        os._exit(1)  # nanomem died before the signal was armed
    return config


MAX_TITLE = 1000  # characters of a document's own title: the rest is no title but a payload


def titled(title: object) -> str | None:
    """A document's title as it says it, within MAX_TITLE; None when it has none."""
    return title[:MAX_TITLE] if isinstance(title, str) else None


def emit(value: dict[str, Any]) -> None:
    """One JSON line to the parent, at once (a kill keeps what was said)."""
    sys.stdout.write(json.dumps(value, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def serve(work: Callable[[dict[str, Any], bytes], None]) -> None:
    """The child's main: confined, `work(config, the bytes on stdin)`, which emits lines."""
    config = confine()
    data = sys.stdin.buffer.read()
    try:
        work(config, data)
    except MemoryError:  # its address space is full: said by the exit code, nothing more
        os._exit(MEMORY_EXIT)
