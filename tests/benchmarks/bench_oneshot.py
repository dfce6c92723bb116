"""One shot: `nanomem chat -m hi` as a new user runs it, whole process, wall time and peak RSS.

Default settings (only `llm.model` and `llm.api_base` set, as a person with a local
OpenAI-compatible server would), against the loopback fake answering at once in a process of
its own. One home; an unmeasured first run onboards it and warms the disk caches; each
measured run uses a session of its own, so every run sends the same small prompt. The child
compiles its modules once, in that first run, into a bytecode cache of its own
(`PYTHONPYCACHEPREFIX`), as `pip install` does at install time: with `PYTHONDONTWRITEBYTECODE`
set around it, every run would otherwise compile nanomem's sources again (~0.05 s). Peak
memory is the child's own maximum resident set (wait4's ru_maxrss). A reference row runs the
same with `llm.transport = "litellm"` (fewer runs: ~5 s each).

    python tests/benchmarks/bench_oneshot.py [--runs N] [--litellm-runs N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common  # before any nanomem import: repository root on sys.path, litellm offline

TARGET_S = 0.6
TARGET_MIB = 100.0


def env_for(home: Path, base_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOMEM_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(
        PYTHONPYCACHEPREFIX=str(home.parent / "pycache"),
        NANOMEM_HOME=str(home),
        NANOMEM_LLM__MODEL="openai/fake",
        NANOMEM_LLM__API_BASE=base_url,
        PYTHONPATH=str(_common.REPO),  # this checkout's code, not an installed copy
    )
    env.update(extra)
    return env


def measure(env: dict[str, str], runs: int, tag: str) -> list[tuple[float, float]]:
    results = []
    for n in range(runs):
        command = [sys.executable, "-m", "nanomem", "chat", "-m", "hi", "--session", f"{tag}{n}"]
        started = time.perf_counter()
        with tempfile.TemporaryFile() as err:
            child = subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=err, cwd=_common.REPO
            )
            assert child.stdout is not None
            out = child.stdout.read()
            # wait4, not wait(): the rusage of this one child (ru_maxrss is in KiB on Linux).
            _, status, usage = os.wait4(child.pid, 0)
            elapsed = time.perf_counter() - started
            child.returncode = os.waitstatus_to_exitcode(status)
            child.stdout.close()
            err.seek(0)
            assert child.returncode == 0 and b"echo:" in out, (out, err.read())
        results.append((elapsed, usage.ru_maxrss / 1024))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--litellm-runs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, _common.ModelServer() as server:
        home = Path(tmp) / "home"
        default = env_for(home, server.base_url)
        measure(default, 1, "warm")  # onboards the home; bytecode and disk caches
        lean = measure(default, args.runs, "run")
        litellm_env = env_for(home, server.base_url, NANOMEM_LLM__TRANSPORT="litellm")
        heavy = measure(litellm_env, args.litellm_runs, "litellm") if args.litellm_runs else []
    wall = _common.median([w for w, _ in lean])
    peak = max(m for _, m in lean)
    ok = wall <= TARGET_S and peak <= TARGET_MIB
    rows = [
        [
            "default settings (model + api_base: the lean client)",
            f"{wall:.3f}",
            ", ".join(f"{w:.3f}" for w, _ in lean),
            f"{peak:.0f}",
            f"≤ {TARGET_S} s, ≤ {TARGET_MIB:.0f} MiB",
        ]
    ]
    if heavy:
        rows.append(
            [
                '`llm.transport = "litellm"` (reference)',
                f"{_common.median([w for w, _ in heavy]):.3f}",
                ", ".join(f"{w:.3f}" for w, _ in heavy),
                f"{max(m for _, m in heavy):.0f}",
                "—",
            ]
        )
    print('### `nanomem chat -m "hi"`, zero-latency model, whole process\n')
    print(_common.table(["settings", "median s", "runs s", "peak RSS MiB", "target"], rows))
    print(
        f"\n{_common.verdict(ok)}: median {wall:.3f} s ≤ {TARGET_S} s "
        f"and peak {peak:.0f} MiB ≤ {TARGET_MIB:.0f} MiB"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
