"""Ranked recall over 100,000 history entries: building the FTS5 index, then searching it.

history.jsonl is written with 100,000 summary entries (a dated line of 15–40 words drawn with
Zipf-like frequencies from 5,000 made-up words of 3–10 letters, as a language has a few very
common words and many rare ones; spread over 40 chats, a tenth of them groups; every 997th
entry says "the notebook is in the attic", a few mention a zeppelin). Then:

1. the index is built from nothing (`Recall.sync()`, the same catch-up a missing index gets);
2. one append of 10 entries followed by the catch-up that brings the index level again;
3. queries, each run 30 times after a warm-up, through `Recall.search_history` as the tool
   runs it (the check that the index is current included): two words in any order, a rare
   word, a common word, a prefix, a quoted phrase, a date range, words no entry has all of
   (the any-word fallback), and a group's view of its own entries.

    python tests/benchmarks/bench_recall.py

4. adversarial queries (10 KB of `a* `; 32 prefixes of common words), the same way.

Target: every query's median <= 20 ms; an adversarial query's <= 200 ms.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import _common  # noqa: F401 (puts the repository on sys.path)

from nanomem.audience import audience_of
from nanomem.features.recall.recall import Recall
from nanomem.memory.history import HistoryEntry, HistoryStore, NewEntry
from nanomem.tools import ToolContext

ENTRIES = 100_000
START = datetime(2026, 1, 1, tzinfo=UTC)  # a year of entries, stamped in order
RUNS = 30
TARGET_MS = 20.0
ADVERSARIAL_TARGET_MS = 200.0


def make_vocabulary(rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words: set[str] = set()
    while len(words) < 5000:
        words.add("".join(rng.choices(letters, k=rng.randint(3, 10))))
    ordered = sorted(words)
    rng.shuffle(ordered)
    return ordered


def queries(vocabulary: list[str]) -> dict[str, str]:
    """Word ranks pick how common a word is: rank 1 is in about one entry in six."""
    return {
        "two words, any order": "attic notebook",
        "rare word": "zeppelin",
        "common word (rank 1)": vocabulary[0],
        "mid word (rank 100)": vocabulary[99],
        "two common words (ranks 2, 3)": f"{vocabulary[2]} {vocabulary[1]}",
        "prefix (4 letters of rank 50)": vocabulary[49][:4] + "*",
        "quoted phrase": '"in the attic"',
        "date range (a month)": f"{vocabulary[9]} since:2026-03-01 until:2026-03-31",
        "no entry has all (fallback)": "zeppelin attic nosuchword",
        "group's own entries": vocabulary[4],
    }


def adversarial(vocabulary: list[str]) -> dict[str, str]:
    """Queries a hostile or careless model may send: 10 KB of a one-letter prefix (47 s over
    20,000 entries before queries were bounded), and 32 different prefixes of common words."""
    prefixes = list(dict.fromkeys(word[:3] for word in vocabulary[:200]))[:32]
    return {
        "adversarial: 10 KB of `a* `": "a* " * 3414,
        "adversarial: 32 common 3-letter prefixes": " ".join(p + "*" for p in prefixes),
    }


def write_history(path: Path, vocabulary: list[str], rng: random.Random) -> None:
    weights = [1 / (rank + 1) for rank in range(len(vocabulary))]
    chats = [f"telegram:{1000 + i}" for i in range(36)] + [f"telegram:-{500 + i}" for i in range(4)]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for cursor in range(1, ENTRIES + 1):
            moment = START + timedelta(seconds=cursor * 364 * 86400 // ENTRIES)
            stamp = moment.isoformat()
            words = rng.choices(vocabulary, weights, k=rng.randint(15, 40))
            if cursor % 997 == 0:
                words += ["the", "notebook", "is", "in", "the", "attic"]
            if cursor % 20011 == 0:
                words.append("zeppelin")
            content = f"- {stamp[:10]}: {' '.join(words)}"
            entry = HistoryEntry(cursor, stamp, rng.choice(chats), content, "summary")
            fh.write(entry.to_json() + "\n")


def timed(call: object) -> float:
    return timed_both(call)[0]


def timed_both(call: object) -> tuple[float, float]:
    """Wall and CPU milliseconds (CPU shows the cost apart from other load on the machine)."""
    started, cpu = time.perf_counter(), time.process_time()
    call()  # type: ignore[operator]
    return (time.perf_counter() - started) * 1000, (time.process_time() - cpu) * 1000


async def main() -> int:
    rng = random.Random(17)
    with tempfile.TemporaryDirectory() as root:
        history = HistoryStore(Path(root) / "memory")
        vocabulary = make_vocabulary(rng)
        write_history(history.path, vocabulary, rng)
        recall = Recall(history, Path(root) / "index" / "history.sqlite3")
        build_s = timed(recall.sync) / 1000
        index_mb = recall.path.stat().st_size / 2**20
        late = [NewEntry("telegram:1000", f"- note {i} late", "summary") for i in range(10)]
        await history.append(late)
        catch_up_ms = timed(recall.sync)
        rows = []
        missed = False
        asked = {**queries(vocabulary), **adversarial(vocabulary)}
        for label, query in asked.items():
            words, since, until = [], None, None
            for term in query.split():
                if term.startswith("since:"):
                    since = term.removeprefix("since:")
                elif term.startswith("until:"):
                    until = term.removeprefix("until:")
                else:
                    words.append(term)
            text = " ".join(words)
            if label.startswith("group"):
                chat = ToolContext(audience=audience_of("telegram:-501", True))
            else:
                chat = ToolContext(audience=audience_of("telegram:1000", False))

            def search(
                text: str = text,
                since: str | None = since,
                until: str | None = until,
                chat: ToolContext = chat,
            ) -> str:
                return recall.search_history(chat, text, 10, since, until)

            result = search()
            found = result.count("\n[") + result.startswith("[")
            both = [timed_both(search) for _ in range(RUNS)]
            times = [wall for wall, _ in both]
            median = statistics.median(times)
            target = ADVERSARIAL_TARGET_MS if label.startswith("adversarial") else TARGET_MS
            missed |= median > target
            cpu = statistics.median(c for _, c in both)
            rows.append((label, query, found, median, max(times), cpu, target))
        recall.close()
    print(
        f"{ENTRIES:,} entries: index built in {build_s:.2f} s ({index_mb:.1f} MiB); "
        f"an append of 10 caught up in {catch_up_ms:.1f} ms\n"
    )
    print("| query | text | hits | median ms | max ms | CPU median ms | target |")
    print("|---|---|---|---|---|---|---|")
    for label, query, found, median, worst, cpu, target in rows:
        verdict = "met" if median <= target else "**missed**"
        figures = f"{found} | {median:.2f} | {worst:.2f} | {cpu:.2f}"
        shown = query if len(query) <= 60 else f"{query[:24]}… ({len(query):,} characters)"
        print(f"| {label} | `{shown}` | {figures} | ≤ {target:.0f} ms — {verdict} |")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
