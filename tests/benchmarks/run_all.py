"""Run every tests/benchmarks/bench_*.py in turn, print their tables, then a summary.

    python tests/benchmarks/run_all.py [NAME ...]     # e.g. run_all.py turn startup

Exits 0 only if every benchmark met its target.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PYTHON = HERE.parents[1] / ".venv" / "bin" / "python"


def main() -> int:
    wanted = set(sys.argv[1:])
    scripts = [
        path
        for path in sorted(HERE.glob("bench_*.py"))
        if not wanted or path.stem.removeprefix("bench_") in wanted
    ]
    python = str(PYTHON if PYTHON.exists() else sys.executable)
    summary: list[tuple[str, str, float]] = []
    for script in scripts:
        print(f"## {script.name}\n", flush=True)
        started = time.perf_counter()
        code = subprocess.run([python, str(script)], check=False).returncode
        elapsed = time.perf_counter() - started
        outcome = {0: "target met", 1: "target missed"}.get(code, f"error (exit {code})")
        summary.append((script.name, outcome, elapsed))
        print(flush=True)
    print("## Summary\n\n| benchmark | outcome | took s |\n|---|---|---|")
    for name, outcome, elapsed in summary:
        print(f"| {name} | {outcome} | {elapsed:.0f} |")
    return 0 if all(outcome == "target met" for _, outcome, _ in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
