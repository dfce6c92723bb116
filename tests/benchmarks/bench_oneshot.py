"""One shot: `nanomem chat -m hi` as a new user runs it, whole process, wall time and peak RSS.

Default settings (only `llm.model` and `llm.api_base` set, as a person with a local
OpenAI-compatible server would), against the loopback fake answering at once in a process of
its own. One home; an unmeasured first run onboards it and warms the disk caches; each
measured run uses a session of its own, so every run sends the same small prompt. The child
compiles its modules once, in that first run, into a bytecode cache of its own
(`PYTHONPYCACHEPREFIX`), as `pip install` does at install time: with `PYTHONDONTWRITEBYTECODE`
set around it, every run would otherwise compile nanomem's sources again (~0.05 s). Peak
memory is the child's own maximum resident set (wait4's ru_maxrss); its CPU time (user +
system, from the same rusage) prints beside the wall, which a busy machine stretches more.
A reference row runs the same with `llm.transport = "litellm"` (fewer runs: ~5 s each).
Memory is judged as the whole peak, as issue 30 measured it (51 MiB then, 43 at 3e0758e); the
peak less the bare interpreter's (`python -c pass`, measured alike) prints beside it.

`--before PATH` runs the same measurement on another checkout (say the base commit in a git
worktree) with this interpreter, interleaved run by run with this one, and prints both rows.

    python tests/benchmarks/bench_oneshot.py [--runs N] [--litellm-runs N] [--before PATH]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import _common  # before any nanomem import: repository root on sys.path, litellm offline

TARGET_S = 0.40  # issue 30 #7: under 3e0758e's 0.42 s
TARGET_MIB = 45.0  # the whole peak RSS, the interpreter's included


def env_for(home: Path, base_url: str, repo: Path = _common.REPO, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOMEM_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(
        PYTHONPYCACHEPREFIX=str(home.parent / "pycache"),
        NANOMEM_HOME=str(home),
        NANOMEM_LLM__MODEL="openai/fake",
        NANOMEM_LLM__API_BASE=base_url,
        PYTHONPATH=str(repo),  # this checkout's code, not an installed copy
    )
    env.update(extra)
    return env


def measure(
    env: dict[str, str], runs: int, tag: str, command: list[str] | None = None
) -> list[tuple[float, float, float]]:
    """Wall seconds, peak MiB and CPU seconds of each run of `command` (by default
    `chat -m hi`)."""
    results = []
    for n in range(runs):
        argv = command or ["-m", "nanomem", "chat", "-m", "hi", "--session", f"{tag}{n}"]
        done = subprocess.run(
            [sys.executable, "-c", _LAUNCH, sys.executable, *argv],
            env=env,
            capture_output=True,
            cwd=env["PYTHONPATH"],
            check=False,
        )
        *out, report = done.stdout.rsplit(b"\n", 1)
        wall, kib, cpu, code = report.split()
        ok = int(code) == 0 and (command is not None or b"echo:" in b"".join(out))
        assert ok, (done.stdout, done.stderr)
        results.append((float(wall), int(kib) / 1024, float(cpu)))
    return results


# Starts one child and prints its output, then its wall seconds, peak RSS (KiB), CPU seconds
# (user + system) and exit code.
# The child is started from this small process, not from the benchmark: a child's ru_maxrss
# counts the memory of the process that started it (vfork shares it until exec), and the
# benchmark's own is ~40 MiB.
_LAUNCH = """
import os, subprocess, sys, time
started = time.perf_counter()
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)
out = child.stdout.read()
_, status, usage = os.wait4(child.pid, 0)  # the rusage of this one child (KiB on Linux)
elapsed = time.perf_counter() - started
code = os.waitstatus_to_exitcode(status)
cpu = usage.ru_utime + usage.ru_stime
sys.stdout.buffer.write(out + b"\\n%.6f %d %.6f %d" % (elapsed, usage.ru_maxrss, cpu, code))
"""


def row(name: str, runs: list[tuple[float, float, float]], bare: float, target: str) -> list[str]:
    walls = [w for w, _, _ in runs]
    peak = max(m for _, m, _ in runs)
    timing = ", ".join(f"{w:.3f}" for w in walls)
    return [
        name,
        f"{_common.median(walls):.3f}",
        timing,
        f"{_common.median([c for _, _, c in runs]):.3f}",
        f"{peak:.0f}",
        f"{peak - bare:.0f}",
        target,
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--litellm-runs", type=int, default=2)
    parser.add_argument("--before", type=Path, help="another checkout, measured alike")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, _common.ModelServer() as server:
        home = Path(tmp) / "home"
        default = env_for(home, server.base_url)
        bare = max(m for _, m, _ in measure(default, 3, "bare", ["-c", "pass"]))
        measure(default, 1, "warm")  # onboards the home; bytecode and disk caches
        before_env = None
        if args.before is not None:
            before_env = env_for(Path(tmp) / "before", server.base_url, args.before.resolve())
            before_env["PYTHONPYCACHEPREFIX"] += "-before"
            measure(before_env, 1, "warm")
        lean: list[tuple[float, float, float]] = []
        before: list[tuple[float, float, float]] = []
        for n in range(args.runs):  # interleaved: the machine's other work hits both alike
            lean += measure(default, 1, f"run{n}-")
            if before_env is not None:
                before += measure(before_env, 1, f"run{n}-")
        litellm_env = env_for(home, server.base_url, NANOMEM_LLM__TRANSPORT="litellm")
        heavy = measure(litellm_env, args.litellm_runs, "litellm") if args.litellm_runs else []
    wall = _common.median([w for w, _, _ in lean])
    peak = max(m for _, m, _ in lean)
    ok = wall <= TARGET_S and peak <= TARGET_MIB
    goal = f"≤ {TARGET_S} s, ≤ {TARGET_MIB:.0f} MiB peak"
    rows = [row("default settings (model + api_base: the lean client)", lean, bare, goal)]
    if before:
        rows.append(row(f"the same, before: {args.before}", before, bare, "—"))
    if heavy:
        rows.append(row('`llm.transport = "litellm"` (reference)', heavy, bare, "—"))
    print('### `nanomem chat -m "hi"`, zero-latency model, whole process\n')
    headers = ["settings", "median s", "runs s", "CPU s (median)", "peak RSS MiB"]
    headers += ["over the interpreter", "target"]
    print(_common.table(headers, rows))
    print(f"\nthe bare interpreter (`python -c pass`): {bare:.0f} MiB")
    print(
        f"\n{_common.verdict(ok)}: median {wall:.3f} s ≤ {TARGET_S} s "
        f"and peak {peak:.0f} MiB ≤ {TARGET_MIB:.0f} MiB"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
