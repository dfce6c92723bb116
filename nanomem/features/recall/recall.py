"""Ranked recall over all history: a SQLite FTS5 index derived from memory/history.jsonl.

history.jsonl stays the source of truth. The index is a cache of it that any process may bring
up to date: before every search (and after every append) the archive's newest cursor is read
from the file itself and compared with the last cursor indexed, so entries appended by another
process are picked up, and an index that is missing, unreadable, ahead of the file or built
from a different file is rebuilt from scratch.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from time import monotonic
from typing import TYPE_CHECKING, Annotated
from zoneinfo import ZoneInfo

from loguru import logger
from pydantic import Field

from nanomem.agent import Feature
from nanomem.features.recall.matches import Hit, TimedOut, newest, ranked
from nanomem.features.recall.search_query import parse_day, parse_query
from nanomem.memory import HistoryStore
from nanomem.tools import Tool, ToolContext, read_only_tool

if TYPE_CHECKING:
    import sqlite3

SCHEMA_VERSION = 2  # 2: a prefix index of 3 letters (adversarial prefix queries)
BATCH = 5000  # entries read and inserted per step of a catch-up
TIME_LIMIT_S = 2.0  # the default of memory.search_time_limit_s
MAX_IDLE_READERS = 4
RANKED_SHARE = 0.8  # of the time limit, for ranking; the rest collects unranked matches
# `chat` holds one token per entry naming its session (hex, so no tokenizer splits it), so a
# group's search is part of the full-text match instead of a scan of every match.
SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS entries USING fts5(
    content, chat, tokenize = 'unicode61 remove_diacritics 2', prefix = '3'
);
CREATE TABLE IF NOT EXISTS facts (
    cursor INTEGER PRIMARY KEY, session TEXT NOT NULL, stamp TEXT NOT NULL, epoch REAL NOT NULL,
    reached REAL NOT NULL  -- the latest time stamped up to this entry: never decreases
);
CREATE INDEX IF NOT EXISTS facts_by_time ON facts (reached, cursor);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


@dataclass(frozen=True)
class Found:
    hits: list[Hit]
    notes: list[str]  # what was cut from the query, or that the time limit stopped it


def chat_token(session: str) -> str:
    return "s" + session.encode("utf-8", "replace").hex()


def epoch_of(stamp: str) -> float:
    try:
        return datetime.fromisoformat(stamp).astimezone().timestamp()
    except ValueError:
        return 0.0


def open_index(path: Path, schema: str, version: int) -> sqlite3.Connection:
    """The writer's connection to a derived index (this one, the web app's of messages);
    sqlite3.DatabaseError when the file cannot be read."""
    import sqlite3

    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        db.execute("PRAGMA busy_timeout = 10000")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")  # derived data: a loss is rebuilt
        if db.execute("PRAGMA user_version").fetchone()[0] != version:
            # Made by another version (or just created): built again from nothing.
            tables = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            for (name,) in tables.fetchall():
                if not name.startswith("entries_"):  # FTS5's own go with `entries`
                    db.execute(f'DROP TABLE IF EXISTS "{name}"')
            db.executescript(schema)
            db.execute(f"PRAGMA user_version = {version}")
    except sqlite3.DatabaseError:
        db.close()
        raise
    return db


def remove_index(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)


class Recall(Feature):
    """The index at `path`; blocking calls (the tool runs in a worker thread). As a feature:
    the `search_history` tool and a line of the system prompt saying when to use it."""

    name = "recall"

    def __init__(
        self,
        history: HistoryStore,
        path: Path,
        timezone: str | None = None,
        *,
        time_limit_s: float = TIME_LIMIT_S,
    ) -> None:
        self.history = history
        self.path = path
        self.zone = ZoneInfo(timezone) if timezone else None  # config has checked the name
        self.time_limit_s = time_limit_s
        self._lock = threading.Lock()  # the writer's connection, shared by this process's threads
        self._db: sqlite3.Connection | None = None
        self._pool_lock = threading.Lock()  # searches' own connections, kept for the next ones
        self._idle: list[sqlite3.Connection] = []
        self._generation = 0  # counts replacements of the index file

    # -- keeping the index up to date --------------------------------------------------------

    def sync(self) -> int:
        """Index what the archive holds beyond the index; the number of entries added."""
        import sqlite3  # on first use: a turn without an inbox or a search loads none of it (1 MiB)

        with self._lock:
            try:
                return self._sync(self._open())
            except sqlite3.OperationalError as exc:  # busy: another process is rebuilding it
                logger.warning("history index not brought up to date: {}", exc)
                return 0
            except sqlite3.DatabaseError as exc:  # unreadable: it is only a cache
                logger.warning("history index {} is unreadable ({}); rebuilding", self.path, exc)
                self._discard()
                return self._sync(self._open())

    def sync_quietly(self) -> None:
        """After an append: a failure here must never fail the append (the next search retries)."""
        try:
            self.sync()
        except Exception:
            logger.exception("could not update the history index")

    def _sync(self, db: sqlite3.Connection) -> int:
        if self._current(db):
            return 0  # the usual case: a read of the file's tail and of three rows
        db.execute("BEGIN IMMEDIATE")  # another process may be catching up too: one at a time
        try:
            # Read again inside the transaction: another process may have indexed meanwhile.
            newest = next(self.history.iter_backwards(), None)
            indexed, stamp = self._position(db)
            if newest is None or newest.cursor < indexed or not self._same_file(indexed, stamp):
                if indexed:
                    logger.info("history index does not match history.jsonl; rebuilding it")
                db.execute("DELETE FROM entries")
                db.execute("DELETE FROM facts")
                indexed = 0
            added = 0
            reached = db.execute("SELECT coalesce(max(reached), 0) FROM facts").fetchone()[0]
            while newest is not None and indexed < newest.cursor:
                batch = self.history.read_after(indexed, BATCH)
                if not batch:
                    break
                db.executemany(
                    "INSERT OR REPLACE INTO entries (rowid, content, chat) VALUES (?, ?, ?)",
                    [(e.cursor, e.content, chat_token(e.session)) for e in batch],
                )
                rows = []
                for e in batch:
                    epoch = epoch_of(e.timestamp)
                    reached = max(reached, epoch)
                    rows.append((e.cursor, e.session, e.timestamp, epoch, reached))
                db.executemany(
                    "INSERT OR REPLACE INTO facts (cursor, session, stamp, epoch, reached) "
                    "VALUES (?, ?, ?, ?, ?)",
                    rows,
                )
                added += len(batch)
                indexed, stamp = batch[-1].cursor, batch[-1].timestamp
            self._set_position(db, indexed, stamp if indexed else "")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return added

    def _current(self, db: sqlite3.Connection) -> bool:
        """The index ends with the archive's newest entry (by cursor and timestamp)."""
        newest = next(self.history.iter_backwards(), None)
        seen = (newest.cursor, newest.timestamp) if newest else (0, "")
        return seen == self._position(db)

    def _same_file(self, indexed: int, stamp: str) -> bool:
        """The entry the index ends with is still in the archive as it was indexed."""
        if not indexed:
            return True
        found = self.history.read_after(indexed - 1, 1)
        return bool(found) and found[0].cursor == indexed and found[0].timestamp == stamp

    @staticmethod
    def _position(db: sqlite3.Connection) -> tuple[int, str]:
        rows = dict(db.execute("SELECT name, value FROM meta").fetchall())
        return int(rows.get("cursor", 0)), rows.get("stamp", "")

    @staticmethod
    def _set_position(db: sqlite3.Connection, cursor: int, stamp: str) -> None:
        db.executemany(
            "INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)",
            [("cursor", str(cursor)), ("stamp", stamp)],
        )

    def _open(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = open_index(self.path, SCHEMA, SCHEMA_VERSION)
        return self._db

    def _discard(self) -> None:
        self._close_readers()
        if self._db is not None:
            self._db.close()
            self._db = None
        remove_index(self.path)

    def close(self) -> None:
        self._close_readers()
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    # -- searching ---------------------------------------------------------------------------

    def search(
        self,
        query: str,
        limit: int = 10,
        *,
        only: str | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> Found:
        """Best match first (BM25). All words must match; if no entry has them all, entries
        with any of them are ranked instead. `only` keeps one session's entries. Past the
        time limit the search stops and returns what it found so far, with a note."""
        parsed = parse_query(query)
        notes = list(parsed.notes)
        if parsed.match() is None:
            return Found([], notes)
        self.sync()
        start = monotonic()
        # Ranking needs every match before its first row: if it runs out of time, the rest
        # of the limit collects the newest matches, which come one by one.
        ranked_by, newest_by = start + RANKED_SHARE * self.time_limit_s, start + self.time_limit_s
        with self._reader() as db:
            for match in (parsed.match(), parsed.match(any_word=True)):
                assert match is not None  # there are terms
                if only is not None:
                    match = f'{match} AND chat : "{chat_token(only)}"'
                try:
                    hits = ranked(db, match, limit, since, until, ranked_by)
                except TimedOut:
                    hits = newest(db, match, limit, since, until, newest_by)
                    notes.append(
                        f"The search stopped at its time limit ({self.time_limit_s:g} s): "
                        + ("these are the newest matches found by then, unranked; " if hits else "")
                        + "entries may be missing. Search for fewer, rarer words."
                    )
                    return Found(hits, notes)
                if hits:
                    return Found(hits, notes)
        return Found([], notes)

    @contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        """A connection of its own for one search, so searches run side by side, and beside
        a catch-up holding the writer's connection (WAL lets readers go on meanwhile)."""
        import sqlite3

        with self._pool_lock:
            generation = self._generation
            db = self._idle.pop() if self._idle else None
        if db is None:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA busy_timeout = 10000")
            db.execute("PRAGMA query_only = 1")
        try:
            yield db
        finally:
            db.set_progress_handler(None, 0)
            with self._pool_lock:
                # One opened before the index file was replaced still reads the old file.
                keep = generation == self._generation and len(self._idle) < MAX_IDLE_READERS
                if keep:
                    self._idle.append(db)
            if not keep:
                db.close()

    def _close_readers(self) -> None:
        with self._pool_lock:
            self._generation += 1
            idle, self._idle = self._idle, []
        for db in idle:
            db.close()

    # -- the tool ----------------------------------------------------------------------------

    def tools(self) -> list[Tool]:
        return [Tool.from_function(self.search_history)]

    def prompt_section(self) -> str:
        return "recall.md.j2"

    @read_only_tool
    def search_history(
        self,
        context: ToolContext,
        query: Annotated[
            str,
            Field(
                min_length=1,
                description='Words in any order; "an exact phrase" in quotes; word* for a prefix',
            ),
        ],
        limit: Annotated[int, Field(ge=1, le=50, description="Most entries to return")] = 10,
        since: Annotated[
            str | None, Field(description="Only entries from this date on (YYYY-MM-DD)")
        ] = None,
        until: Annotated[
            str | None, Field(description="Only entries up to this date (YYYY-MM-DD), inclusive")
        ] = None,
    ) -> str:
        """Search the archive of earlier conversations, best match first."""
        # A group searches only its own conversations (unless groups see personal memory).
        only = None if context.personal else context.session
        start = parse_day(since, end=False, zone=self.zone) if since else None
        end = parse_day(until, end=True, zone=self.zone) if until else None
        found = self.search(query, limit, only=only, since=start, until=end)
        asked = query if len(query) <= 80 else query[:80] + "…"  # never echo 10 KB back
        if not parse_query(query).terms:
            shown = f"{asked!r} has no words to search for."
        elif not found.hits:
            shown = f"No history entries match {asked!r}."
        else:
            shown = "\n\n".join(
                f"[{h.timestamp}] ({h.session}) #{h.cursor}\n{h.snippet}" for h in found.hits
            )
        return "\n".join([*found.notes, shown])
