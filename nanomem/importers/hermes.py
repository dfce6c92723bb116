"""Hermes Agent (github.com/NousResearch/hermes-agent): `~/.hermes` holds SOUL.md,
memories/MEMORY.md and memories/USER.md (entries separated by a line with `§`,
tools/memory_tool.py), skills/ (in category folders; skills/.bundled_manifest names those it
ships), cron/jobs.json (`{"jobs": [...]}`, cron/jobs.py) and the sessions in state.db (SQLite:
`sessions`, `messages` with role, content and a Unix-time timestamp; hermes_state.py)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from nanomem.importers.found import (
    MAX_HISTORY,
    Found,
    Job,
    MemoryText,
    PastEntry,
    Target,
    iso_from_epoch,
    iso_from_text,
    obj,
    read_jobs,
    read_skills,
    string,
    text_field,
)
from nanomem.importers.source import SourceTree, clean
from nanomem.text.plural import plural

NAME = "hermes"
DEFAULT_PATH = Path("~/.hermes")
_ENTRY_DELIMITER = re.compile(r"\n[ \t]*§[ \t]*\n")
MAX_ROWS = 50_000  # messages read from state.db
MAX_QUERY_S = 20.0
MAX_MESSAGE_CHARS = 100_000  # of one message's text
MAX_TEXT_CHARS = 32 * 1024 * 1024  # of all messages read
SQLITE_MAGIC = b"SQLite format 3\x00"


def read(tree: SourceTree) -> Found:
    found = Found(NAME, tree.root, skipped=tree.skipped)  # one list: what the tree refused too
    places: tuple[tuple[str, Target], ...] = (
        ("SOUL.md", "SOUL.md"),
        ("memories/USER.md", "USER.md"),
        ("memories/MEMORY.md", "memory/MEMORY.md"),
    )
    for rel, target in places:
        text = tree.read_text(rel)
        if text and text.strip():
            entries = (e.strip() for e in _ENTRY_DELIMITER.split(text))
            found.memory.append(MemoryText(target, rel, "\n\n".join(e for e in entries if e)))
    bundled = frozenset(
        line.partition(":")[0].strip()
        for line in (tree.read_text("skills/.bundled_manifest") or "").splitlines()
    )
    read_skills(tree, found, "skills", depth=3, bundled=bundled)
    jobs(tree, found, "cron/jobs.json")
    if (db := tree.real_path("state.db")) is not None:
        sessions(found, db)
        if (db.parent / "state.db-wal").is_file() and (db.parent / "state.db-wal").stat().st_size:
            found.skip(
                "state.db-wal",
                "the latest messages may still be here, which a read-only reader cannot see: "
                "stop Hermes (it folds them into state.db as it exits) and import again",
            )
    return found


def jobs(tree: SourceTree, found: Found, rel: str) -> None:
    read_jobs(tree, found, rel, _job, bare_list=True)


def _job(found: Found, item: dict[str, Any], name: str, source: str) -> None:
    if item.get("enabled") is False or item.get("state") == "paused":
        found.skip(source, "paused or switched off there; not imported")
        return
    if item.get("script") or item.get("no_agent"):
        found.skip(source, "runs a script, not a message to the agent; kept as data only")
        return
    text, key = clean(text_field(item, "prompt")), text_field(item, "id") or name
    schedule = obj(item.get("schedule"))
    kind = schedule.get("kind")
    minutes = schedule.get("minutes")
    if not text:
        found.skip(source, "has no prompt for the agent; nothing to schedule")
    elif kind == "once" and (when := iso_from_text(schedule.get("run_at"))):
        found.jobs.append(Job(source, key, text, at=when))
    elif kind == "interval" and isinstance(minutes, int) and not isinstance(minutes, bool):
        found.jobs.append(Job(source, key, text, every_minutes=minutes))
    elif kind == "cron" and isinstance(expr := schedule.get("expr"), str):
        zone = string(item.get("timezone"))
        found.jobs.append(Job(source, key, text, cron=expr, timezone=zone))
    else:
        found.skip(source, "a schedule nanomem has no form for (or not readable)")


def sessions(found: Found, db: Path) -> None:
    """Each session one history entry (a raw transcript of its user and assistant turns),
    dated by its first message. Opened read-only and immutable: nothing is written to the
    file or beside it, whatever it holds."""
    import sqlite3

    rel = "state.db"
    with db.open("rb") as fh:
        if fh.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
            found.skip(rel, "not a SQLite database; no session imported")
            return
    deadline = time.monotonic() + MAX_QUERY_S
    try:
        connection = sqlite3.connect(f"{db.as_uri()}?mode=ro&immutable=1", uri=True)
    except sqlite3.Error as exc:
        found.skip(rel, f"cannot be opened ({exc}); no session imported")
        return
    rows: list[tuple[Any, ...]] = []
    try:
        connection.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        # Each text and id cut in SQLite itself: a hostile row of a gigabyte is never loaded.
        # Only the terminal's sessions: state.db tags a session by its platform alone, so a
        # Telegram or Discord session may be a group's, whose members' words must not become
        # the owner's personal history.
        others = connection.execute(
            "SELECT count(*), group_concat(DISTINCT substr(source, 1, 20)) FROM sessions "
            "WHERE source IS NOT 'cli'"
        ).fetchone()
        if others and others[0]:
            found.skip(
                rel,
                f"{plural(others[0], 'session')} of {others[1]} not imported: state.db does not "
                "say which were group chats, and a group's words stay out of your own history",
            )
        cursor = connection.execute(
            "SELECT substr(m.session_id, 1, 80), m.role, substr(m.content, 1, ?), m.timestamp "
            "FROM messages m JOIN sessions s ON s.id = m.session_id WHERE s.source = 'cli' "
            "AND m.role IN ('user', 'assistant') AND m.content IS NOT NULL "
            "ORDER BY m.session_id, m.timestamp, m.id LIMIT ?",
            (MAX_MESSAGE_CHARS, MAX_ROWS + 1),
        )
        size = 0
        while batch := cursor.fetchmany(1000):
            rows += batch
            size += sum(len(row[2]) for row in batch if isinstance(row[2], str))
            if size > MAX_TEXT_CHARS or len(rows) > MAX_ROWS:
                found.skip(rel, "over the limits of one import; the later sessions not imported")
                break
    except sqlite3.Error as exc:  # not Hermes' tables, damaged, or over time
        found.skip(rel, f"not readable as Hermes' sessions ({str(exc)[:120]}); none imported")
        return
    finally:
        connection.close()
    _transcripts(found, rel, rows[:MAX_ROWS])


def _transcripts(found: Found, rel: str, rows: list[tuple[Any, ...]]) -> None:
    by_session: dict[str, list[tuple[str, str, Any]]] = {}
    for session, role, content, stamp in rows:
        if isinstance(content, str) and content.strip():
            by_session.setdefault(str(session)[:80], []).append((str(role), content, stamp))
    for session, messages in by_session.items():
        when = iso_from_epoch(messages[0][2])
        if when is None:
            found.skip(f"{rel} session {session}", "no readable time; not imported")
            continue
        if len(found.history) >= MAX_HISTORY:
            found.skip(rel, f"past {MAX_HISTORY} history entries; the rest not imported")
            return
        transcript = "\n".join(f"{role}: {clean(text).strip()}" for role, text, _ in messages)
        source = f"{rel} session {session}"
        found.history.append(PastEntry(source, when, transcript, "raw", group=f"{rel} sessions"))
