"""Sources for `nanomem import`: copies of the fixtures in tests/fixtures/import/<project>/ (laid
out as each project keeps its own folder), Hermes' state.db built with the tables hermes_state.py
makes, and a snapshot of a home to compare byte for byte."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "import"
PROJECTS = ("nanobot", "openclaw", "hermes")
# A line of each project's memory that a chat's prompt must show once imported.
REMEMBERED = {
    "nanobot": "Ada is writing a book about lighthouses",
    "openclaw": "Ada's sister Grace visits every December",
    "hermes": "Ada runs a small bakery in Leipzig",
}
HERMES_SESSIONS = [
    # (session id, source, [(role, content, unix time)])
    (
        "20261120_071502_a1b2c3",
        "telegram",
        [
            ("user", "What rye ratio did we settle on?", 1763619302.5),
            ("assistant", "70% rye, 30% wheat, 75% hydration.", 1763619310.0),
        ],
    ),
    ("20261121_183000_d4e5f6", "cli", [("user", "Remind me: oven service Monday.", 1763746200.0)]),
]


def source(tmp_path: Path, project: str) -> Path:
    """A private copy of the project's fixture (tests may damage it), with Hermes' state.db."""
    copy = tmp_path / f"source-{project}"
    shutil.copytree(FIXTURES / project, copy)
    if project == "hermes":
        build_hermes_state_db(copy / "state.db")
    return copy


def build_hermes_state_db(path: Path) -> None:
    """The tables and columns of Hermes' SessionDB that an import reads, in WAL mode as Hermes
    keeps it (checkpointed, so an immutable reader sees every row)."""
    db = sqlite3.connect(path)
    try:
        db.executescript(
            """
            PRAGMA journal_mode=WAL;
            CREATE TABLE sessions (
                id TEXT PRIMARY KEY, source TEXT NOT NULL, user_id TEXT, model TEXT,
                parent_session_id TEXT, started_at REAL NOT NULL, ended_at REAL,
                end_reason TEXT, message_count INTEGER DEFAULT 0, title TEXT
            );
            CREATE TABLE messages (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                session_id TEXT NOT NULL REFERENCES sessions(id),
                role TEXT NOT NULL, content TEXT, tool_call_id TEXT, tool_calls TEXT,
                tool_name TEXT, timestamp REAL NOT NULL, token_count INTEGER,
                finish_reason TEXT
            );
            """
        )
        for session, origin, messages in HERMES_SESSIONS:
            db.execute(
                "INSERT INTO sessions (id, source, started_at, message_count) VALUES (?, ?, ?, ?)",
                (session, origin, messages[0][2], len(messages)),
            )
            for role, content, stamp in messages:
                db.execute(
                    "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?,?,?,?)",
                    (session, role, content, stamp),
                )
            db.execute(
                "INSERT INTO messages (session_id, role, content, tool_name, timestamp) "
                "VALUES (?, 'tool', '{\"ok\": true}', 'terminal', ?)",
                (session, messages[-1][2] + 1),
            )
        db.commit()
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()


def snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every file and folder below `root`: its mode and bytes (a link: its target)."""
    found: dict[str, tuple[int, bytes]] = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        if path.is_symlink():
            data = str(path.readlink()).encode()
        elif path.is_file():
            data = path.read_bytes()
        else:
            data = b""
        found[str(path.relative_to(root))] = (info.st_mode, data)
    return found
