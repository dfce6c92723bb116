"""`/why` on a memory with 1,000 versions: the first trace after a start reads the whole
history (dulwich's annotate); a trace after a new version (what every Dream run makes) must
follow on from the blame already made, not read the history again.

Rows: the first /why after a start; the same /why again; a /why after one new version (the
median of 10 rounds, each adding a version); after 10 new versions at once.

    python tests/benchmarks/bench_why.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import _common

from nanomem.features.dream import Provenance
from nanomem.memory.gitstore import GitStore
from nanomem.memory.history import HistoryStore

VERSIONS = 1_000
ROUNDS = 10
TARGET_MS = 50.0  # a /why after a new version


def build(root: Path) -> tuple[GitStore, Path]:
    workspace = root / "workspace"
    (workspace / "memory").mkdir(parents=True)
    (workspace / "SOUL.md").write_text("# Soul\n")
    (workspace / "USER.md").write_text("# User\n- Lives in Quito\n")
    (workspace / "memory" / "MEMORY.md").write_text("# Memory\n")
    git = GitStore(root / "memory.git", workspace)
    git.ensure()
    lines = ["# Memory"]
    for i in range(VERSIONS):
        lines.append(f"- fact {i}: the budget meeting moved to room {i % 17}")
        if i % 7 == 0 and len(lines) > 3:
            del lines[2]
        (workspace / "memory" / "MEMORY.md").write_text("\n".join(lines) + "\n")
        git.commit_if_changed("dream")
    return git, workspace


def add_version(git: GitStore, workspace: Path, n: int) -> None:
    memory = workspace / "memory" / "MEMORY.md"
    memory.write_text(memory.read_text() + f"- added later {n}\n")
    git.commit_if_changed("manual edit")


def timed_ms(provenance: Provenance, words: str) -> float:
    started = time.perf_counter()
    answer = provenance.answer(words)
    elapsed = (time.perf_counter() - started) * 1000
    assert answer.startswith("memory/MEMORY.md"), answer
    return elapsed


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print(f"building {VERSIONS:,} memory versions…", file=sys.stderr)
        git, workspace = build(root)
        history = HistoryStore(workspace / "memory")
        # A new store and Provenance: as after a start, nothing is kept.
        provenance = Provenance(GitStore(git.git_dir, workspace), history)
        first = timed_ms(provenance, "fact 500")
        again = timed_ms(provenance, "fact 900")
        after_one = []
        for n in range(ROUNDS):
            add_version(git, workspace, n)
            after_one.append(timed_ms(provenance, f"added later {n}"))
        for n in range(ROUNDS, ROUNDS + 10):
            add_version(git, workspace, n)
        after_ten = timed_ms(provenance, "fact 700")
    median = _common.median(after_one)
    rows = [
        ["first /why after a start (reads all versions)", f"{first:.0f}", ""],
        ["the same version again", f"{again:.1f}", ""],
        [f"after one new version, median of {ROUNDS}", f"{median:.1f}", f"≤ {TARGET_MS:.0f}"],
        ["after ten new versions", f"{after_ten:.1f}", ""],
    ]
    print(_common.table([f"/why, {VERSIONS:,} versions", "ms", "target"], rows))
    ok = median <= TARGET_MS
    print(f"\n{_common.verdict(ok)}: a /why after a new version took {median:.1f} ms (median)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
