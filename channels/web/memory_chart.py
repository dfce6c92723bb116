"""The Timeline's pictures: how many facts the memory holds, day by day, and how many each day
added and removed. Counted from the versions themselves (their diffs and files), each version
once: versions never change, so a view costs the versions it has not seen yet, not the history.

A fact is a line worth asking /why about: words, and no heading."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from channels.web.diffs import changed_lines
from nanomem.features.dream import meaningful
from nanomem.memory import GitStore

DAYS = 30  # drawn, up to today
MIN_DAYS = 7  # drawn even for a younger memory
MAX_VERSIONS = 5_000  # looked at for those days: a bound, far above a month of Dream runs
KEPT = 20_000  # counted versions remembered (a few dozen bytes each)


@dataclass(frozen=True)
class Counted:
    added: int  # facts this version added
    removed: int
    facts: int  # facts in the memory files after it


@dataclass(frozen=True)
class Day:
    day: date
    added: int
    removed: int
    facts: int  # at the day's end


class FactCounts:
    def __init__(self, git: GitStore) -> None:
        self.git = git
        self._counted: dict[str, Counted] = {}
        self._guard = threading.Lock()  # counted in worker threads

    def count(self, sha: str) -> Counted:
        """Blocking; each version is read once."""
        with self._guard:
            known = self._counted.get(sha)
        if known is not None:
            return known
        _, diff = self.git.show(sha)
        added, removed = changed_lines(diff)
        files = self.git.files_at(sha)
        facts = sum(
            meaningful(line)
            for content in files.values()
            if content is not None
            for line in content.decode("utf-8", errors="replace").splitlines()
        )
        counted = Counted(sum(map(meaningful, added)), sum(map(meaningful, removed)), facts)
        with self._guard:
            if len(self._counted) >= KEPT:
                self._counted.pop(next(iter(self._counted)))
            self._counted[sha] = counted
        return counted

    def daily(self, days: int = DAYS, today: date | None = None) -> list[Day]:
        """Blocking. Up to the last `days` days, oldest first, from the first version's day
        (at least a week); a day without versions keeps the count of the day before."""
        today = today or datetime.now().astimezone().date()
        first = today - timedelta(days=days - 1)
        since = datetime.combine(first, time.min).astimezone()
        walked = self.git.walk(MAX_VERSIONS, since)  # newest first
        if walked and walked[-1][1] >= since:  # the whole history fits: start at its first day
            first = max(first, min(walked[-1][1].date(), today - timedelta(days=MIN_DAYS - 1)))
            days = (today - first).days + 1
        inside = [(sha, when.date()) for sha, when in walked if when.date() >= first]
        before = next((sha for sha, when in walked if when.date() < first), None)
        facts = self.count(before).facts if before is not None else 0
        by_day: dict[date, list[Counted]] = {}
        for sha, day in reversed(inside):  # oldest first: the day's last is its end
            by_day.setdefault(day, []).append(self.count(sha))
        drawn = []
        for offset in range(days):
            day = first + timedelta(days=offset)
            counted = by_day.get(day, [])
            if counted:
                facts = counted[-1].facts
            added = sum(c.added for c in counted)
            removed = sum(c.removed for c in counted)
            drawn.append(Day(day, added, removed, facts))
        return drawn
