"""Sets resource limits on itself, then execs the command (bwrap, or the reaper), so everything
the command starts inherits them.

Started by the shell tool as `python -I -S rlimits.py NAME=VALUE... -- ARGV...` (a few
standard modules only, nothing of nanomem imported: it costs a command ~10 ms). A process of
its own instead of preexec_fn (unsafe in a threaded parent) or prlimit() on the child after
the spawn (it may have forked already): nothing of the command runs before the limits hold.

RLIMIT_NPROC counts every thread of the real user id, the owner's own processes included (and
a user namespace's parent level counts them too), so `nproc` is the number of processes the
command may add: the user's count now plus that many. The kernel never applies it to root.
"""

from __future__ import annotations

import os
import resource
import sys

BROKEN = 126  # as a shell says of a command it could not run

LIMITS = {
    "as": resource.RLIMIT_AS,
    "nproc": resource.RLIMIT_NPROC,
    "fsize": resource.RLIMIT_FSIZE,
    "nofile": resource.RLIMIT_NOFILE,
    "cpu": resource.RLIMIT_CPU,
    "core": resource.RLIMIT_CORE,
}


def threads_of(uid: int) -> int:
    """Threads the user runs now, as RLIMIT_NPROC counts them."""
    count = 0
    # os, not pathlib: its import (~6 ms) would be most of what this script costs a command.
    for name in os.listdir("/proc"):  # noqa: PTH208
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", encoding="utf-8") as status_file:  # noqa: PTH123
                status = status_file.read()
        except OSError:
            continue  # ended meanwhile
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields.get("Uid", "-1 0").split()[0]) == uid:
            count += int(fields.get("Threads", "1"))
    return count


def apply(spec: dict[str, int]) -> None:
    """Set each limit to `spec`'s value, never above the hard limit already in force."""
    for name, value in spec.items():
        which = LIMITS[name]
        if name == "nproc":
            if os.getuid() == 0:
                continue  # never applied to root: not worth the count
            value += threads_of(os.getuid())
        _, hard = resource.getrlimit(which)
        # CPU: SIGXCPU at the soft limit, SIGKILL a second later for a command that ignores it.
        want_hard = value + 1 if name == "cpu" else value
        if hard != resource.RLIM_INFINITY:
            want_hard = min(want_hard, hard)
        resource.setrlimit(which, (min(value, want_hard), want_hard))


def main(argv: list[str]) -> int:
    split = argv.index("--")
    spec = {name: int(value) for name, value in (arg.split("=", 1) for arg in argv[:split])}
    command = argv[split + 1 :]
    try:
        apply(spec)
        os.execv(command[0], command)
    except OSError as exc:
        print(f"cannot run the command: {exc.strerror}", file=sys.stderr)
    return BROKEN


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
