"""tools.shell_limits as the shell applies them: what each command may use, and the command
line that runs it so (through rlimits.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MIB = 1024 * 1024
RLIMITS = Path(__file__).with_name("rlimits.py")


@dataclass(frozen=True)
class Limits:
    """Each process's memory, the processes added, a file's size, open files, CPU seconds; and
    the size of each tmpfs the sandbox mounts. The defaults are the settings' (a test says so)."""

    memory_mb: int = 1024
    processes: int = 256
    file_size_mb: int = 1024
    open_files: int = 1024
    cpu_s: int = 300
    tmpfs_mb: int = 256

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """`argv` run under these limits."""
        spec = {
            "as": self.memory_mb * MIB,
            "nproc": self.processes,
            "fsize": self.file_size_mb * MIB,
            "nofile": self.open_files,
            "cpu": self.cpu_s,
        }
        named = [f"{name}={value}" for name, value in spec.items()]
        return [sys.executable, "-I", "-S", str(RLIMITS), *named, "--", *argv]

    def describe(self, sandboxed: bool) -> str:
        processes = (
            "processes not limited (root)" if os.geteuid() == 0 else f"{self.processes} processes"
        )
        tmpfs = f", tmpfs {self.tmpfs_mb} MB" if sandboxed else ""
        return (
            f"memory {self.memory_mb} MB, {processes}, files {self.file_size_mb} MB, "
            f"{self.open_files} open files, CPU {self.cpu_s} s{tmpfs}"
        )
