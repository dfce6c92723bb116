"""Where each MCP server stands, said the same way by /mcp, GET /health and `nanomem status`.

`nanomem status` runs in another process: the running one keeps a small state file in the
home (written whole, crash-safe) that status reads.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from nanomem.durable import atomic_write_text

VERSION = 1
SHOWN_LEFT_OUT = 10
Kind = Literal["disabled", "starting", "ready", "restarting", "failed", "stopped"]


@dataclass(frozen=True)
class ServerState:
    kind: Kind
    reason: str = ""  # why it is not ready ("exit 1", "did not answer within 60 s")
    retry_at: float = 0.0  # wall clock of the next start (restarting, failed)
    tools: tuple[str, ...] = field(default=())  # the model's names for its tools
    # Its tools not offered to the model: "name (why)", the first SHOWN_LEFT_OUT of them.
    left_out: tuple[str, ...] = field(default=())
    left_out_count: int = 0

    @property
    def down(self) -> bool:
        """Wrong in a way the person may want to know of (a warning in /health)."""
        return self.kind in ("restarting", "failed")

    def describe(self, now: float | None = None) -> str:
        if self.kind in ("restarting", "failed"):
            wait = max(0, round(self.retry_at - (time.time() if now is None else now)))
            if self.kind == "failed":
                return f"failed ({self.reason}); trying again in {wait} s"
            return f"restarting in {wait} s after {self.reason}"
        if self.kind == "ready":
            ready = f"ready, {len(self.tools)} tool{'s' if len(self.tools) != 1 else ''}"
            return f"{ready}, {self.left_out_count} left out" if self.left_out_count else ready
        return self.kind

    def left_out_line(self) -> str:
        """Which of its tools the model does not get, and why ("" when none)."""
        if not self.left_out_count:
            return ""
        more = self.left_out_count - len(self.left_out)
        return f"left out: {', '.join(self.left_out)}{f' and {more} more' if more > 0 else ''}"


def state_file(folder: Path, pid: int | None = None) -> Path:
    """This process's file: the gateway and a `nanomem chat` may run at once, each with its own
    servers (a one-shot `chat -m` writes none)."""
    return folder / f"{os.getpid() if pid is None else pid}.json"


def write_states(folder: Path, states: dict[str, ServerState]) -> None:
    record = {
        "version": VERSION,
        "pid": os.getpid(),
        "updated_at": time.time(),
        "servers": {name: asdict(state) for name, state in states.items()},
    }
    atomic_write_text(state_file(folder), json.dumps(record, ensure_ascii=False) + "\n")


def forget_states(folder: Path) -> None:
    state_file(folder).unlink(missing_ok=True)


def read_states(path: Path) -> tuple[int, dict[str, ServerState]] | None:
    """(pid of the process that wrote it, the states); None when there is no usable file."""
    try:
        record: Any = json.loads(path.read_text(encoding="utf-8"))
        servers = {
            name: ServerState(
                kind=entry["kind"],
                reason=entry.get("reason", ""),
                retry_at=float(entry.get("retry_at", 0.0)),
                tools=tuple(entry.get("tools", ())),
                left_out=tuple(str(item) for item in entry.get("left_out", ())),
                left_out_count=int(entry.get("left_out_count", 0)),
            )
            for name, entry in record["servers"].items()
        }
        return int(record["pid"]), servers
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def status_lines(
    folder: Path, configured: dict[str, bool], gateway: int | None = None
) -> list[tuple[str, str]]:
    """`nanomem status` rows, one per configured server (`configured`: name → enabled), from
    the files of the processes still running (a killed one leaves its file behind).
    `gateway`: the pid of the gateway running on the home: what it runs is said as it says it,
    including servers it started that the config no longer names, and those it never started
    (configured after it began: a config edit needs a restart)."""
    running: dict[int, dict[str, ServerState]] = {}
    paths = sorted(folder.glob("*.json")) if folder.is_dir() else []
    for path in paths:
        found = read_states(path)
        if found is not None and alive(found[0]):
            running[found[0]] = found[1]
    rows = []
    for name, enabled in configured.items():
        seen = [(pid, states[name]) for pid, states in running.items() if name in states]
        if not enabled:
            line = "disabled"
        elif seen:
            line = "; ".join(f"{state.describe()} ({_who(pid, gateway)})" for pid, state in seen)
        elif gateway is not None:
            line = (
                f"not started by the gateway (pid {gateway}): configured after it started? "
                "Restart the gateway to start it"
            )
        else:
            line = "not running (nanomem gateway or nanomem chat starts it)"
        rows.append((f"mcp {name}", line))
        if enabled:
            rows += [(f"mcp {name}", state.left_out_line()) for _, state in seen if state.left_out]
    started = running.get(gateway, {}) if gateway is not None else {}
    for name, state in started.items():
        if name not in configured:
            rows.append(
                (
                    f"mcp {name}",
                    f"{state.describe()} (gateway, pid {gateway}), no longer in the config: "
                    "restart the gateway to stop it",
                )
            )
    return rows


def _who(pid: int, gateway: int | None) -> str:
    return f"gateway, pid {pid}" if pid == gateway else f"pid {pid}"
