"""Reading matches out of the history index: ranked best first, or the newest first, each
within a deadline (SQLite's progress handler interrupts a query that runs past it)."""

from __future__ import annotations

from dataclasses import dataclass
from time import monotonic
from typing import TYPE_CHECKING

from loguru import logger

if TYPE_CHECKING:
    import sqlite3

SNIPPET_TOKENS = 32
# BM25 ranks at most this many matches, the newest: a word found in most of 100,000 entries
# would otherwise cost 100+ ms to rank. Fewer matches than this are all ranked.
RANK_WINDOW = 1000
PROGRESS_STEPS = 1000  # SQLite steps between looks at the clock: ~0.1 ms of work


@dataclass(frozen=True)
class Hit:
    cursor: int
    session: str
    timestamp: str
    snippet: str


class TimedOut(Exception):
    pass


def _stop_at(db: sqlite3.Connection, deadline: float) -> None:
    """SQLite calls this every PROGRESS_STEPS steps of a query; true interrupts the query."""
    db.set_progress_handler(lambda: monotonic() > deadline, PROGRESS_STEPS)


def ranked(
    db: sqlite3.Connection,
    match: str,
    limit: int,
    since: float | None,
    until: float | None,
    deadline: float,
) -> list[Hit]:
    """Best first; `TimedOut` past the deadline."""
    import sqlite3  # loaded by the index before any search; here for its exceptions

    _stop_at(db, deadline)
    try:
        low, high = _cursor_range(db, since, until)
        # Where the newest RANK_WINDOW matches begin: a walk of the match list, newest
        # first, that needs no ranking.
        row = db.execute(
            "SELECT rowid FROM entries WHERE entries MATCH ? AND rowid BETWEEN ? AND ? "
            "ORDER BY rowid DESC LIMIT 1 OFFSET ?",
            (match, low, high, RANK_WINDOW - 1),
        ).fetchone()
        rows = db.execute(
            "SELECT rowid, snippet(entries, 0, '', '', '…', ?) FROM entries "
            "WHERE entries MATCH ? AND rowid BETWEEN ? AND ? ORDER BY rank LIMIT ?",
            (SNIPPET_TOKENS, match, max(low, row[0] if row else low), high, limit),
        ).fetchall()
    except sqlite3.OperationalError as exc:
        if monotonic() > deadline:
            raise TimedOut from None
        logger.warning("history search {!r} failed: {}", match, exc)  # the query is quoted
        return []
    return _hits(db, rows, since, until)


def newest(
    db: sqlite3.Connection,
    match: str,
    limit: int,
    since: float | None,
    until: float | None,
    deadline: float,
) -> list[Hit]:
    """Newest first, unranked: the matches found before the deadline."""
    import sqlite3

    _stop_at(db, deadline)
    rows: list[tuple[int, str]] = []
    try:
        low, high = _cursor_range(db, since, until)
        rows.extend(
            db.execute(
                "SELECT rowid, snippet(entries, 0, '', '', '…', ?) FROM entries "
                "WHERE entries MATCH ? AND rowid BETWEEN ? AND ? ORDER BY rowid DESC LIMIT ?",
                (SNIPPET_TOKENS, match, low, high, limit),
            )
        )
    except sqlite3.OperationalError as exc:
        # Past the deadline `rows` holds what came before it; any other failure is said.
        if monotonic() <= deadline:
            logger.warning("history search {!r} failed: {}", match, exc)  # the query is quoted
    return _hits(db, rows, since, until)


def _hits(
    db: sqlite3.Connection,
    rows: list[tuple[int, str]],
    since: float | None,
    until: float | None,
) -> list[Hit]:
    db.set_progress_handler(None, 0)  # a lookup of at most `limit` rows
    facts = {
        cursor: (session, stamp, epoch)
        for cursor, session, stamp, epoch in db.execute(
            "SELECT cursor, session, stamp, epoch FROM facts WHERE cursor IN "
            f"({','.join('?' * len(rows))})",
            [r[0] for r in rows],
        )
    }
    hits = []
    for cursor, snippet in rows:
        session, stamp, epoch = facts.get(cursor, ("?", "?", 0.0))
        if (since is None or epoch >= since) and (until is None or epoch < until):
            hits.append(Hit(int(cursor), session, stamp, str(snippet)))
    return hits


def _cursor_range(
    db: sqlite3.Connection, since: float | None, until: float | None
) -> tuple[int, int]:
    """Dates as a range of cursors (entries are stamped as they are appended, in order)."""
    low, high = 0, 2**62
    # Entries are stamped as they are appended, so time follows the cursor: a step along
    # the index of the latest time reached, never a scan. (An entry stamped out of order,
    # after a clock was set back, counts by when it was written among the others.)
    if since is not None:
        found = db.execute(
            "SELECT cursor FROM facts WHERE reached >= ? ORDER BY reached, cursor LIMIT 1",
            (since,),
        ).fetchone()
        low = found[0] if found else high
    if until is not None:
        found = db.execute(
            "SELECT cursor FROM facts WHERE reached < ? ORDER BY reached DESC, cursor DESC LIMIT 1",
            (until,),
        ).fetchone()
        high = found[0] if found else 0
    return low, high
