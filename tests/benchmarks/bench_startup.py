"""Startup: time to the interactive prompt, and a one-shot `nanomem chat -m` round trip.

(a) spawns `nanomem chat` in a pseudo-terminal (pexpect) and times until `you › ` shows,
    then exits with Ctrl-D; (b) runs `nanomem chat -m "hi"` against the zero-latency fake
    model. Each run gets a fresh onboarded home; one unmeasured warm-up run comes first.

    python tests/benchmarks/bench_startup.py [--prompt-runs N] [--oneshot-runs N]
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
import pexpect

from tests.fakes.openai_server import FakeOpenAI

NANOMEM = str(_common.REPO / ".venv" / "bin" / "nanomem")
PROMPT = "you ›"  # prompt_toolkit draws the trailing space as a cursor move
TARGET = 0.5  # seconds until the prompt shows


def env_for(home: Path, base_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOMEM_")}
    env.update(
        NANOMEM_HOME=str(home),
        NANOMEM_LLM__MODEL="openai/fake",
        NANOMEM_LLM__API_BASE=base_url,
        NANOMEM_LLM__API_KEY=_common.API_KEY,
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        TERM="xterm",
        PROMPT_TOOLKIT_NO_CPR="1",  # a pty cannot answer cursor-position requests
    )
    return env


def time_to_prompt(env: dict[str, str]) -> float:
    started = time.perf_counter()
    child = pexpect.spawn(
        NANOMEM, ["chat"], env=env, encoding="utf-8", timeout=30, dimensions=(40, 100)
    )
    try:
        child.expect_exact(PROMPT)
        elapsed = time.perf_counter() - started
        child.send("\x04")  # Ctrl-D: leave
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    return elapsed


def time_one_shot(env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [NANOMEM, "chat", "-m", "hi"], env=env, capture_output=True, text=True, timeout=60
    )
    elapsed = time.perf_counter() - started
    assert done.returncode == 0 and "echo:" in done.stdout, (done.stdout, done.stderr)
    return elapsed


def fresh_home(root: Path, n: int) -> Path:
    return _common.new_home(root / f"run{n}").root


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt-runs", type=int, default=5)
    parser.add_argument("--oneshot-runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAI() as server:
        root = Path(tmp)
        homes = iter(range(1_000))

        def env() -> dict[str, str]:
            return env_for(fresh_home(root, next(homes)), server.base_url)

        time_to_prompt(env())  # warm-up: bytecode and disk caches
        prompt = [time_to_prompt(env()) for _ in range(args.prompt_runs)]
        one_shot = [time_one_shot(env()) for _ in range(args.oneshot_runs)]
    ok = _common.median(prompt) <= TARGET
    rows = [
        [
            "(a) `nanomem chat` until `you ›` shows",
            f"{_common.median(prompt):.3f}",
            ", ".join(f"{t:.3f}" for t in prompt),
            f"≤ {TARGET} s",
        ],
        [
            '(b) `nanomem chat -m "hi"`, zero-latency model',
            f"{_common.median(one_shot):.3f}",
            ", ".join(f"{t:.3f}" for t in one_shot),
            "(none)",
        ],
    ]
    print("### Startup\n")
    print(_common.table(["what", "median s", "runs s", "target"], rows))
    print(f"\n{_common.verdict(ok)}: time to the prompt ≤ {TARGET} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
