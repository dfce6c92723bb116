"""Ranked search over the chats' own messages (the session files), for the web app's Recall.

The history index (recall.py) holds what consolidation archived: a summary of many messages,
and nothing of the messages not archived yet. A message's own words, and its place in its
chat, are only in its session file. This index follows each session file (they are only ever
appended to) from where it last read, and reads a file again from its start when it was
replaced or cut shorter. Like the history index it is derived, never trusted: a file that is
missing, unreadable or of another version is built again from the sessions. What people and
the model wrote is indexed (user and assistant text, each cut to MAX_MESSAGE_CHARS), never
tool output, and a query is bounded as the tool's is (search_query.py, matches.py).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from time import monotonic
from typing import TYPE_CHECKING, Any

from loguru import logger

from nanomem.audience import legacy_room
from nanomem.features.recall.matches import TimedOut, newest, ranked
from nanomem.features.recall.recall import (
    RANKED_SHARE,
    SCHEMA,
    TIME_LIMIT_S,
    chat_token,
    epoch_of,
    open_index,
    remove_index,
)
from nanomem.features.recall.search_query import parse_query
from nanomem.text import untrusted_json

if TYPE_CHECKING:
    import sqlite3

SCHEMA_VERSION = 1
MAX_MESSAGE_CHARS = 20_000
BLOCK = 4 * 2**20  # bytes of a session file read at a time
SEARCHED_ROLES = ("user", "assistant")
RUNTIME_HEADER = "[runtime · "  # templates/runtime_context.md.j2: stored with a user's message
_PLACES = """
CREATE TABLE IF NOT EXISTS places (
    cursor INTEGER PRIMARY KEY, file TEXT NOT NULL, idx INTEGER NOT NULL, role TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS places_by_file ON places (file);
CREATE TABLE IF NOT EXISTS files (
    name TEXT PRIMARY KEY, inode INTEGER NOT NULL, offset INTEGER NOT NULL,
    count INTEGER NOT NULL, key TEXT NOT NULL, version INTEGER NOT NULL, room INTEGER
);
"""


@dataclass(frozen=True)
class MessageHit:
    session: str  # the chat's session key ("" when its file does not say)
    index: int  # the message's place among the chat's messages
    role: str
    timestamp: str
    snippet: str
    room: bool  # from a shared room


@dataclass(frozen=True)
class MessagesFound:
    hits: list[MessageHit]
    notes: list[str]


@dataclass
class _Followed:
    """How far a session file is indexed, and what its header and state records said."""

    name: str
    inode: int
    offset: int = 0  # bytes read (whole lines only)
    count: int = 0  # messages seen: the next one's index
    key: str = ""
    version: int = 1
    room: bool | None = None

    @property
    def is_room(self) -> bool:
        """As Session.is_room: the stored word, or the old rule for a file from before it."""
        if self.room is not None:
            return self.room
        return self.version < 2 and legacy_room(self.key)


def said(message: dict[str, Any]) -> str:
    """What a message says as text, without the runtime line stored before a user's words."""
    content = message.get("content")
    if isinstance(content, list):
        content = "\n".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    if not isinstance(content, str):
        return ""
    if message.get("role") == "user" and content.startswith(RUNTIME_HEADER):
        content = content.partition("\n\n")[2]
    return content


class MessageIndex:
    """The index at `path` of the session files in `sessions`; blocking calls (run them in a
    worker thread), one at a time."""

    def __init__(self, sessions: Path, path: Path, *, time_limit_s: float = TIME_LIMIT_S) -> None:
        self.sessions, self.path, self.time_limit_s = sessions, path, time_limit_s
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def search(self, query: str, limit: int = 10) -> MessagesFound:
        """Best match first (BM25), all words, else any of them; past the time limit the
        newest matches found by then, with a note."""
        import sqlite3

        parsed = parse_query(query)
        notes = list(parsed.notes)
        if parsed.match() is None:
            return MessagesFound([], notes)
        with self._lock:
            try:
                db = self._open()
                self._sync(db)
            except sqlite3.DatabaseError as exc:  # only a cache: built again from the files
                logger.warning("message index {} is unreadable ({}); rebuilding", self.path, exc)
                self._discard()
                db = self._open()
                self._sync(db)
            start = monotonic()
            ranked_by = start + RANKED_SHARE * self.time_limit_s
            for match in (parsed.match(), parsed.match(any_word=True)):
                assert match is not None
                try:
                    hits = ranked(db, match, limit, None, None, ranked_by)
                except TimedOut:
                    hits = newest(db, match, limit, None, None, start + self.time_limit_s)
                    notes.append(
                        f"The search stopped at its time limit ({self.time_limit_s:g} s): "
                        "these are the newest matches found by then, unranked."
                    )
                    return MessagesFound(self._placed(db, hits), notes)
                if hits:
                    return MessagesFound(self._placed(db, hits), notes)
        return MessagesFound([], notes)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def _placed(self, db: sqlite3.Connection, hits: list[Any]) -> list[MessageHit]:
        files = {row[0]: _Followed(*row) for row in db.execute("SELECT * FROM files")}
        places = {
            cursor: (file, idx, role)
            for cursor, file, idx, role in db.execute(
                f"SELECT cursor, file, idx, role FROM places WHERE cursor IN "
                f"({','.join('?' * len(hits))})",
                [hit.cursor for hit in hits],
            )
        }
        found = []
        for hit in hits:
            file, idx, role = places[hit.cursor]
            followed = files[file]
            found.append(
                MessageHit(followed.key, idx, role, hit.timestamp, hit.snippet, followed.is_room)
            )
        return found

    # -- following the session files ---------------------------------------------------------

    def _sync(self, db: sqlite3.Connection) -> None:
        known = {row[0]: _Followed(*row) for row in db.execute("SELECT * FROM files")}
        present = sorted(self.sessions.glob("*.jsonl")) if self.sessions.is_dir() else []
        names = {path.name for path in present}
        db.execute("BEGIN IMMEDIATE")
        try:
            for name in known.keys() - names:
                self._forget(db, name)
            cursor = db.execute("SELECT coalesce(max(cursor), 0) FROM places").fetchone()[0]
            for path in present:
                try:
                    info = path.stat()
                except FileNotFoundError:  # removed meanwhile
                    continue
                followed = known.get(path.name)
                if (
                    followed is None
                    or followed.inode != info.st_ino
                    or info.st_size < followed.offset
                ):
                    if followed is not None:
                        self._forget(db, path.name)
                    followed = _Followed(path.name, info.st_ino)
                elif info.st_size == followed.offset:
                    continue
                cursor = self._read(db, path, followed, cursor)
                db.execute(
                    "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        followed.name,
                        followed.inode,
                        followed.offset,
                        followed.count,
                        followed.key,
                        followed.version,
                        followed.room,
                    ),
                )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _read(self, db: sqlite3.Connection, path: Path, followed: _Followed, cursor: int) -> int:
        """Index the whole lines after `followed.offset`, a block at a time (a long chat is
        never all in memory); the last cursor given out."""
        try:
            with path.open("rb") as fh:
                fh.seek(followed.offset)
                carried = b""
                while block := fh.read(BLOCK):
                    data = carried + block
                    end = data.rfind(b"\n")  # a line still being written is read next time
                    if end < 0:
                        carried = data
                        continue
                    cursor = self._index(db, data[:end], followed, cursor)
                    followed.offset += end + 1
                    carried = data[end + 1 :]
        except OSError as exc:  # a directory in its place, a permission: left for later
            logger.warning("message index: cannot read {} ({})", path.name, exc)
        return cursor

    def _index(self, db: sqlite3.Connection, lines: bytes, followed: _Followed, cursor: int) -> int:
        entries, facts, places = [], [], []
        for line in lines.split(b"\n"):
            try:
                record = untrusted_json.loads(line)
            except ValueError:
                continue
            if not isinstance(record, dict):
                continue
            kind = record.get("_type")
            if kind == "session":
                key, version = record.get("key"), record.get("version")
                followed.key = key if isinstance(key, str) else followed.key
                followed.version = version if isinstance(version, int) else 1
            if kind in ("session", "state") and isinstance(room := record.get("room"), bool):
                followed.room = room
            if kind is not None or "role" not in record:
                continue
            index, followed.count = followed.count, followed.count + 1
            role = record.get("role")
            text = said(record)[:MAX_MESSAGE_CHARS] if role in SEARCHED_ROLES else ""
            if not text.strip():
                continue
            cursor += 1
            stamp = str(record.get("ts", ""))
            entries.append((cursor, text, chat_token(followed.key)))
            facts.append((cursor, followed.key, stamp, epoch_of(stamp), epoch_of(stamp)))
            places.append((cursor, followed.name, index, str(role)))
        db.executemany("INSERT INTO entries (rowid, content, chat) VALUES (?, ?, ?)", entries)
        db.executemany("INSERT INTO facts VALUES (?, ?, ?, ?, ?)", facts)
        db.executemany("INSERT INTO places VALUES (?, ?, ?, ?)", places)
        return cursor

    @staticmethod
    def _forget(db: sqlite3.Connection, name: str) -> None:
        chosen = "(SELECT cursor FROM places WHERE file = ?)"
        db.execute(f"DELETE FROM entries WHERE rowid IN {chosen}", (name,))
        db.execute(f"DELETE FROM facts WHERE cursor IN {chosen}", (name,))
        db.execute("DELETE FROM places WHERE file = ?", (name,))
        db.execute("DELETE FROM files WHERE name = ?", (name,))

    def _open(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = open_index(self.path, SCHEMA + _PLACES, SCHEMA_VERSION)
        return self._db

    def _discard(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        remove_index(self.path)
