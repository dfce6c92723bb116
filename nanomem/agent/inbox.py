"""The durable inbox: a message is on disk before its channel acknowledges it, and leaves only
once its reply has been delivered.

SQLite in WAL mode (standard library, one file, transactions): a batch of messages and the
channel's position in its source (Telegram's update offset) are written in one transaction, so
they are acknowledged together or not at all. Adding is fsynced (`synchronous=FULL`): it
survives power loss, because the source forgets what we acknowledge. Marking a message answered
or done is not fsynced: a process crash cannot undo it, and the worst a power loss can do is
send one reply again.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from loguru import logger

from nanomem.masking import redact

SCHEMA_VERSION = 1
Item = tuple[str, dict[str, Any]]  # (chat, the channel's own form of the message)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    channel TEXT NOT NULL,
    chat TEXT NOT NULL,
    received_at TEXT NOT NULL,
    payload TEXT NOT NULL,  -- the channel's own form of the message (JSON)
    reply TEXT              -- the reply (JSON), once the turn is saved; NULL before
);
CREATE INDEX IF NOT EXISTS messages_by_channel ON messages (channel, seq);
CREATE TABLE IF NOT EXISTS positions (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


@dataclass(frozen=True)
class Pending:
    """A message still in the inbox: not answered yet (`reply` None), or answered but its reply
    not yet delivered."""

    seq: int
    channel: str
    chat: str
    received_at: datetime
    payload: dict[str, Any]
    reply: dict[str, Any] | None


class Inbox(Protocol):
    """Blocking calls: the bus runs them in a worker thread."""

    def add(self, channel: str, items: list[Item], position: tuple[str, str] | None) -> list[int]:
        """Store (chat, payload) items and move a named position, in one durable step."""

    def position(self, name: str) -> str | None: ...

    def answered(self, seq: int, reply: dict[str, Any] | None) -> None:
        """The turn is saved: keep its reply until delivered (None: nothing to deliver)."""

    def done(self, seq: int) -> None: ...

    def pending(self, channel: str) -> list[Pending]:
        """What is left for a channel, oldest first."""

    def count(self) -> int:
        """Messages stored and not yet answered and delivered."""

    def close(self) -> None: ...


class SqliteInbox:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return self._connect()
        except sqlite3.DatabaseError as exc:
            # Unreadable: keep it for inspection and start a new one rather than refuse to run.
            aside = self.path.with_name(f"{self.path.name}.unreadable-{int(time.time())}")
            logger.error("inbox {} is unreadable ({}); moved to {}", self.path, exc, aside)
            for suffix in ("", "-wal", "-shm"):
                source = self.path.with_name(self.path.name + suffix)
                if source.exists():
                    source.rename(aside.with_name(aside.name + suffix))
            return self._connect()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            db.execute("SELECT count(*) FROM messages").fetchone()
        except sqlite3.DatabaseError:
            db.close()
            raise
        for suffix in ("", "-wal", "-shm"):  # conversations: private to the owner
            private = self.path.with_name(self.path.name + suffix)
            if private.exists():
                private.chmod(0o600)
        return db

    def add(self, channel: str, items: list[Item], position: tuple[str, str] | None) -> list[int]:
        now = datetime.now(UTC).isoformat(timespec="milliseconds")
        with self._lock:
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("BEGIN IMMEDIATE")
            try:
                seqs = [
                    int(
                        self._db.execute(
                            "INSERT INTO messages (channel, chat, received_at, payload) "
                            "VALUES (?, ?, ?, ?)",
                            (channel, chat, now, _dumps(payload)),
                        ).lastrowid
                        or 0
                    )
                    for chat, payload in items
                ]
                if position is not None:
                    self._db.execute(
                        "INSERT OR REPLACE INTO positions (name, value) VALUES (?, ?)", position
                    )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("PRAGMA synchronous=NORMAL")
        return seqs

    def position(self, name: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM positions WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])

    def answered(self, seq: int, reply: dict[str, Any] | None) -> None:
        with self._lock:
            if reply is None:
                self._db.execute("DELETE FROM messages WHERE seq = ?", (seq,))
            else:
                self._db.execute(
                    "UPDATE messages SET reply = ? WHERE seq = ?", (_dumps(reply), seq)
                )

    def done(self, seq: int) -> None:
        with self._lock:
            self._db.execute("DELETE FROM messages WHERE seq = ?", (seq,))

    def pending(self, channel: str) -> list[Pending]:
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, channel, chat, received_at, payload, reply FROM messages "
                "WHERE channel = ? ORDER BY seq",
                (channel,),
            ).fetchall()
        found = []
        for seq, name, chat, received, payload, reply in rows:
            try:
                found.append(
                    Pending(
                        seq,
                        name,
                        chat,
                        datetime.fromisoformat(received),
                        json.loads(payload),
                        json.loads(reply) if reply else None,
                    )
                )
            except ValueError:
                logger.error("inbox: message {} of {} is unreadable; skipped", seq, name)
        return found

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM messages").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _dumps(value: dict[str, Any]) -> str:
    # Lone surrogates (from a model or a channel) must not make the write fail. A known secret
    # someone typed is stored masked, as the session stores it.
    return redact(json.dumps(value, ensure_ascii=True))
