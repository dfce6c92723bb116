"""The durable inbox: a message is on disk before its channel acknowledges it, and leaves only
once its reply has been delivered.

SQLite in WAL mode (standard library, one file, transactions): a batch of messages and the
channel's position in its source (Telegram's update offset) are written in one transaction, so
they are acknowledged together or not at all. Adding is fsynced (`synchronous=FULL`): it
survives power loss, because the source forgets what we acknowledge. Marking a message answered
or done is not fsynced: a process crash cannot undo it, and the worst a power loss can do is
send one reply again.

A message whose handling failed inside nanomem stays, with its attempts, the time of its next
attempt and the class of its last error (never the error's text: it may hold a secret); after
the last attempt it is parked: kept, never tried again on its own, until the owner retries or
drops it (`nanomem inbox`).

Attempts are counted as they begin (`begin`), not as they end: a handler that crashes the
process, hangs until it is killed, or is SIGKILLed mid-turn never ends, and would otherwise be
replayed at every start for ever. A message whose attempts are used up without one finishing
is parked when the next would begin.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from loguru import logger

from nanomem.audience import Sender
from nanomem.text.masking import redact_values
from nanomem.text.untrusted_json import loads as untrusted_loads

if TYPE_CHECKING:
    import sqlite3

SCHEMA_VERSION = 3
# (chat, the channel's own form of the message, who sent it as the channel vouched)
Item = tuple[str, dict[str, Any], Sender]
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
# Version 2: what failed attempts left. Added to an older file's table as it opens (ALTER TABLE
# ADD COLUMN changes no row), so every inbox ever written still loads.
_ADDED_COLUMNS = {
    "attempts": "INTEGER NOT NULL DEFAULT 0",  # attempts begun so far, none of them a success
    "next_at": "TEXT",  # when the next attempt is due (ISO, UTC); NULL when none waits
    "last_error": "TEXT",  # the class of the last error
    "preview": "TEXT",  # the message's first words, for `nanomem status`
    "parked_at": "TEXT",  # given up on after the last attempt: the owner decides
    "owner_told": "INTEGER NOT NULL DEFAULT 0",  # the owner was told of the parking
    # Version 3: the sender as its channel vouched for it (JSON); NULL in rows written before.
    "sender": "TEXT",
}
_COLUMNS = (
    "seq, channel, chat, received_at, payload, reply, attempts, next_at, last_error, preview, "
    "parked_at, sender"
)
# attempts so far → seconds until the next attempt, or None: park it.
Plan = Callable[[int], float | None]
# The last error of a message parked because none of its attempts ever ended.
NEVER_FINISHED = "never finished (a crash, a kill or a hang)"


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
    attempts: int = 0  # attempts begun so far
    next_at: datetime | None = None
    last_error: str = ""
    preview: str = ""
    parked_at: datetime | None = None
    sender: Sender | None = None  # None: stored before senders were (read the payload)

    def vouched(self, derived: Sender) -> Sender:
        """Who sent it, as its channel vouched at receipt: a replay is the same message from
        the same person, owner or not as they were then (admission is the channel's to check
        again under today's config). `derived`, read from the payload again, for a row stored
        before senders were."""
        return derived if self.sender is None else self.sender

    @property
    def failed(self) -> bool:
        """Its handling failed and it waits for another attempt (or for the owner, parked).
        One whose attempt never ended (a crash) is not: it is replayed in its chat's order."""
        return self.reply is None and (self.next_at is not None or self.parked_at is not None)


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

    def count_parked(self) -> int: ...

    def begin(self, seq: int, preview: str, plan: Plan) -> Pending | None:
        """Count an attempt before it starts; the message, parked instead, when the attempts
        `plan` allows are used up (None: go on)."""

    def give_back(self, seq: int) -> None:
        """Uncount an attempt that ended before its turn began (a graceful stop)."""

    def failed(
        self, seq: int, error: str, preview: str, plan: Plan, counted: bool = False
    ) -> Pending | None:
        """Record a failed attempt (`counted`: by `begin` already): the next one is due after
        `plan(attempts)` seconds, or the message is parked (None from the plan). The message
        as it is now (None: gone)."""

    def retrying(self) -> list[Pending]:
        """Failed messages waiting for their next attempt, the soonest first."""

    def parked(self) -> list[Pending]: ...

    def untold(self) -> list[Pending]:
        """Parked messages the owner has not been told of yet."""

    def owner_told(self, seq: int) -> None: ...

    def unpark(self, seq: int) -> bool:
        """Try a parked message once more, now."""

    def drop(self, seq: int) -> bool:
        """Remove a failed or parked message for good."""

    def close(self) -> None: ...


class SqliteInbox:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        import sqlite3  # on first use: a turn without an inbox or a search loads none of it (1 MiB)

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
        import sqlite3

        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
            _migrate(db)
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
                            "INSERT INTO messages (channel, chat, received_at, payload, sender) "
                            "VALUES (?, ?, ?, ?, ?)",
                            (channel, chat, now, _dumps(payload), _sender_json(sender)),
                        ).lastrowid
                        or 0
                    )
                    for chat, payload, sender in items
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
        return self._select("WHERE channel = ? ORDER BY seq", channel)

    def begin(self, seq: int, preview: str, plan: Plan) -> Pending | None:
        with self._lock:
            row = self._db.execute(
                "SELECT attempts, next_at FROM messages WHERE seq = ? AND reply IS NULL "
                "AND parked_at IS NULL",
                (seq,),
            ).fetchone()
            if row is None:  # answered already, or gone: nothing to count
                return None
            # A due retry (next_at) was planned when its last attempt ended, or granted by the
            # owner (`nanomem inbox retry`); otherwise the attempts before it never ended.
            attempts, planned = int(row[0]), row[1] is not None
            if planned or not (attempts and plan(attempts) is None):
                # No fsync (as for `answered`): a crash of the process cannot undo the write.
                self._db.execute(
                    "UPDATE messages SET attempts = attempts + 1, next_at = NULL WHERE seq = ?",
                    (seq,),
                )
                return None
            self._db.execute(
                "UPDATE messages SET next_at = NULL, last_error = ?, preview = ?, parked_at = ? "
                "WHERE seq = ?",
                (NEVER_FINISHED, preview, _iso(datetime.now(UTC)), seq),
            )
        found = self._select("WHERE seq = ?", seq)
        return found[0] if found else None

    def give_back(self, seq: int) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE messages SET attempts = attempts - 1 WHERE seq = ? AND attempts > 0 "
                f"AND reply IS NULL AND next_at IS NULL AND NOT ({_PARKED})",
                (seq,),
            )

    def failed(
        self, seq: int, error: str, preview: str, plan: Plan, counted: bool = False
    ) -> Pending | None:
        with self._lock:
            row = self._db.execute(
                "SELECT attempts FROM messages WHERE seq = ? AND reply IS NULL", (seq,)
            ).fetchone()
            if row is None:
                return None
            attempts = max(int(row[0]) + (0 if counted else 1), 1)
            delay = plan(attempts)
            now = datetime.now(UTC)
            due = None if delay is None else _iso(now + timedelta(seconds=delay))
            self._db.execute(
                "UPDATE messages SET attempts = ?, next_at = ?, last_error = ?, preview = ?, "
                "parked_at = ? WHERE seq = ?",
                (attempts, due, error, preview, _iso(now) if due is None else None, seq),
            )
        found = self._select("WHERE seq = ?", seq)
        return found[0] if found else None

    def retrying(self) -> list[Pending]:
        return self._select(
            "WHERE reply IS NULL AND next_at IS NOT NULL AND parked_at IS NULL "
            "ORDER BY next_at, seq"
        )

    def parked(self) -> list[Pending]:
        return self._select(f"WHERE {_PARKED} ORDER BY seq")

    def untold(self) -> list[Pending]:
        """Parked messages the owner has not been told of yet."""
        return self._select(f"WHERE {_PARKED} AND owner_told = 0 ORDER BY seq")

    def owner_told(self, seq: int) -> None:
        with self._lock:
            self._db.execute("UPDATE messages SET owner_told = 1 WHERE seq = ?", (seq,))

    def unpark(self, seq: int) -> bool:
        # Told again should it be parked again: each parking is news.
        with self._lock:
            changed = self._db.execute(
                "UPDATE messages SET parked_at = NULL, owner_told = 0, next_at = ? "
                f"WHERE seq = ? AND {_PARKED}",
                (_iso(datetime.now(UTC)), seq),
            ).rowcount
        return changed > 0

    def drop(self, seq: int) -> bool:
        with self._lock:
            changed = self._db.execute(
                "DELETE FROM messages WHERE seq = ? AND reply IS NULL "
                "AND (next_at IS NOT NULL OR parked_at IS NOT NULL)",
                (seq,),
            ).rowcount
        return changed > 0

    def _select(self, where: str, *args: Any) -> list[Pending]:
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM messages {where}", args).fetchall()
        return _readable(rows)

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM messages").fetchone()[0])

    def count_parked(self) -> int:
        with self._lock:
            row = self._db.execute(f"SELECT count(*) FROM messages WHERE {_PARKED}").fetchone()
        return int(row[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()


# Kept, unanswered, tried no more until the owner says so.
_PARKED = "reply IS NULL AND parked_at IS NOT NULL"


def parked_in(path: Path) -> list[Pending]:
    """The parked messages of an inbox file, read without changing it (`nanomem status`, also
    while the gateway runs); none when there is no inbox or it predates parking. Raises
    sqlite3.Error when it cannot be read."""
    import sqlite3

    if not path.is_file():
        return []
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        have = {row[1] for row in db.execute("PRAGMA table_info(messages)")}
        if "parked_at" not in have:  # written before parking existed: nothing parked
            return []
        # A file the gateway has not migrated yet (version 2) has no senders.
        columns = _COLUMNS if "sender" in have else _COLUMNS.replace("sender", "NULL")
        rows = db.execute(f"SELECT {columns} FROM messages WHERE {_PARKED} ORDER BY seq").fetchall()
    return _readable(rows)


def unpark_in(path: Path, seq: int) -> bool:
    """Try a parked message of an inbox file once more (`nanomem inbox retry`, the web page's
    Retry), also while the gateway runs: it notices within seconds. False when there is no
    such parked message; no inbox file is made by asking."""
    return _changed_in(path, lambda inbox: inbox.unpark(seq))


def drop_in(path: Path, seq: int) -> bool:
    """Remove a failed or parked message of an inbox file for good (`nanomem inbox drop`, the
    web page's Drop); False when there is no such message."""
    return _changed_in(path, lambda inbox: inbox.drop(seq))


def _changed_in(path: Path, change: Callable[[SqliteInbox], bool]) -> bool:
    if not path.is_file():
        return False
    inbox = SqliteInbox(path)
    try:
        return change(inbox)
    finally:
        inbox.close()


def _migrate(db: sqlite3.Connection) -> None:
    """Bring an older inbox up to this version in one transaction (a newer one is left be)."""
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    if version >= SCHEMA_VERSION:
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        have = {row[1] for row in db.execute("PRAGMA table_info(messages)")}
        for name, kind in _ADDED_COLUMNS.items():
            if name not in have:
                db.execute(f"ALTER TABLE messages ADD COLUMN {name} {kind}")
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _readable(rows: list[Any]) -> list[Pending]:
    found = []
    for row in rows:
        seq, name, chat, received, payload, reply, attempts, due, error, preview, parked, by = row
        try:
            found.append(
                Pending(
                    seq,
                    name,
                    chat,
                    datetime.fromisoformat(received),
                    untrusted_loads(payload),
                    untrusted_loads(reply) if reply else None,
                    int(attempts or 0),
                    datetime.fromisoformat(due) if due else None,
                    error or "",
                    preview or "",
                    datetime.fromisoformat(parked) if parked else None,
                    _sender(by),
                )
            )
        except ValueError:
            logger.error("inbox: message {} of {} is unreadable; skipped", seq, name)
    return found


def _sender_json(sender: Sender) -> str:
    return _dumps(asdict(sender))  # masked like the payload


def _sender(stored: str | None) -> Sender | None:
    """A stored sender; None for a row from before senders were stored, or one unreadable."""
    if not stored:
        return None
    data = untrusted_loads(stored)
    if not isinstance(data, dict):
        return None
    text = {k: v for k, v in data.items() if isinstance(v, str)}
    flag = {k: v for k, v in data.items() if isinstance(v, bool)}
    return Sender(
        text.get("id", ""),
        text.get("name", ""),
        is_owner=flag.get("is_owner", False),
        can_answer=flag.get("can_answer", False),
        shared_room=flag.get("shared_room", False),
    )


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds")


def _dumps(value: dict[str, Any]) -> str:
    # Lone surrogates (from a model or a channel) must not make the write fail. A known secret
    # someone typed is stored masked, as the session stores it.
    return json.dumps(redact_values(value), ensure_ascii=True)
