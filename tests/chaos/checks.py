"""What a chaos run is judged by, read from the fakes and the home after every process ended.
Files are loaded with nanomem's own loaders; anything a loader had to skip counts as damage."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import sqlite3
import subprocess
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loguru import logger

from nanomem.memory.history import HistoryEntry, HistoryStore
from nanomem.memory.session import SessionStore
from tests.fakes.openai_server import FACT_PREFIX, fact_line
from tests.fakes.telegram_server import FakeTelegram

MEMORY_FILES = ("SOUL.md", "USER.md", "memory/MEMORY.md")
TOKEN_RE = re.compile(r"\b([qw])(\d+)[xt](\d+)\b")  # q<chat>x<n> (Telegram), w<writer>t<n> (cli)
RESTART_NOTICE = "please send your last message again"
DAMAGE = ("skipped unreadable line", "skipped an unreadable line", "newer nanomem")


@dataclass(frozen=True)
class Sent:
    """One message a person sent the bot through the fake Bot API."""

    chat: int
    number: int
    update_id: int

    @property
    def token(self) -> str:
        return token(self.chat, self.number)


def token(chat: int, number: int) -> str:
    return f"q{chat}x{number:02d}"


def tokens_in(text: str) -> list[str]:
    return [m.group(0) for m in TOKEN_RE.finditer(text)]


@dataclass
class Delivery:
    sent: int = 0
    acknowledged: int = 0
    answered: int = 0
    lost: int = 0  # acknowledged, never answered
    unacknowledged: int = 0  # still waiting at Telegram when the run ended
    duplicated: int = 0  # replies beyond the first to one message
    order_violations: int = 0
    notices: int = 0  # "please send your last message again"
    lost_tokens: list[str] = field(default_factory=list)


def delivery(telegram: FakeTelegram, sent: list[Sent]) -> Delivery:
    """Match every reply to the messages it quotes (the model echoes the message)."""
    result = Delivery(sent=len(sent))
    replies: dict[str, list[int]] = {}  # token -> positions of the replies quoting it
    for position, reply in enumerate(telegram.sent_messages()):
        text = str(reply.get("text") or "")
        result.notices += RESTART_NOTICE in text
        for found in set(tokens_in(text)):
            replies.setdefault(found, []).append(position)
    by_chat: dict[int, list[int]] = {}
    for message in sorted(sent, key=lambda s: (s.chat, s.number)):
        acked = telegram.acknowledged(message.update_id)
        positions = replies.get(message.token, [])
        result.acknowledged += acked
        result.answered += bool(positions)
        result.unacknowledged += not acked
        result.duplicated += max(0, len(positions) - 1)
        if acked and not positions:
            result.lost += 1
            result.lost_tokens.append(message.token)
        if positions:
            by_chat.setdefault(message.chat, []).append(positions[0])
    for firsts in by_chat.values():  # a first reply earlier than an earlier message's first
        result.order_violations += sum(1 for i, p in enumerate(firsts) if i and p < max(firsts[:i]))
    return result


@contextmanager
def warnings_of_loaders() -> Iterator[list[str]]:
    """The warnings nanomem's loaders log while the block runs."""
    seen: list[str] = []
    sink = logger.add(lambda m: seen.append(str(m.record["message"])), level="WARNING")
    try:
        yield seen
    finally:
        logger.remove(sink)


@dataclass
class Files:
    checked: int = 0
    unreadable: int = 0
    notes: list[str] = field(default_factory=list)

    def bad(self, path: Path, why: str) -> None:
        self.unreadable += 1
        self.notes.append(f"unreadable: {path.name}: {why}")


def check_files(home: Path, workspace: Path) -> Files:
    files = Files()
    _sessions(home / "sessions", files)
    _history(workspace / "memory", files)
    for path in (workspace / "memory/.cursor", workspace / "memory/.dream_cursor"):
        if path.exists():
            files.checked += 1
            if not re.fullmatch(r"\d+\s*", path.read_text(encoding="utf-8", errors="replace")):
                files.bad(path, "not a number")
    for path in (home / "dream.json",):
        if path.exists():
            files.checked += 1
            try:
                json.loads(path.read_text(encoding="utf-8"))
            except ValueError as exc:
                files.bad(path, str(exc))
    for path in sorted(home.rglob("*")):  # an inbox file, or any file in an inbox folder
        if path.is_file() and any("inbox" in part for part in path.relative_to(home).parts):
            _inbox(path, files)
    return files


def _sessions(directory: Path, files: Files) -> None:
    for path in sorted(directory.glob("*.jsonl")):
        files.checked += 1
        try:
            header = json.loads(path.open(encoding="utf-8").readline())
            key = header["key"] if header.get("_type") == "session" else None
        except (ValueError, KeyError, UnicodeDecodeError, AttributeError) as exc:
            files.bad(path, f"no readable header ({type(exc).__name__})")
            continue
        if key is None:
            files.bad(path, "the first line is not the session header")
            continue
        with warnings_of_loaders() as seen:
            try:
                asyncio.run(SessionStore(directory).get(key))
            except Exception as exc:
                files.bad(path, f"{type(exc).__name__}: {exc}")
                continue
        _judge(path, seen, files)


def _history(memory: Path, files: Files) -> None:
    path = memory / "history.jsonl"
    if not path.exists():
        return
    files.checked += 1
    with warnings_of_loaders() as seen:
        try:
            store = HistoryStore(memory)
            store.last_cursor()
            entries = list(store.iter_backwards())
        except Exception as exc:
            files.bad(path, f"{type(exc).__name__}: {exc}")
            return
    _judge(path, seen, files)
    cursors = [e.cursor for e in reversed(entries)]
    if clashes := sum(1 for a, b in itertools.pairwise(cursors) if b <= a):
        files.bad(path, f"{clashes} cursors not strictly increasing")


def _judge(path: Path, warnings: list[str], files: Files) -> None:
    for line in warnings:
        if any(mark in line for mark in DAMAGE):
            files.bad(path, line)
            return
        if "torn last line" in line:  # a write cut short by a kill: repaired, no record lost
            files.notes.append(f"repaired: {path.name}: {line}")


def _inbox(path: Path, files: Files) -> None:
    """The inbox's format is its builder's choice: SQLite is checked for integrity, JSON lines
    line by line (a torn last line is allowed); other files only have to be readable."""
    files.checked += 1
    try:
        head = path.read_bytes()
    except OSError as exc:
        files.bad(path, str(exc))
        return
    if head.startswith(b"SQLite format 3\x00"):
        try:
            # Read-write: a WAL file left by a kill is replayed first, as the next start would.
            db = sqlite3.connect(path, timeout=10)
            try:
                verdict = db.execute("PRAGMA integrity_check").fetchone()[0]
            finally:
                db.close()
        except sqlite3.Error as exc:
            verdict = str(exc)
        if verdict != "ok":
            files.bad(path, f"integrity_check: {verdict}")
    elif path.suffix == ".json":
        try:
            json.loads(head)
        except ValueError as exc:
            files.bad(path, f"not JSON: {exc}")
    elif path.suffix in (".jsonl", ".log"):
        lines = head.split(b"\n")
        body = lines[:-1] if head.endswith(b"\n") else lines[:-2]  # the torn tail is allowed
        for number, line in enumerate(body, start=1):
            try:
                if line.strip():
                    json.loads(line)
            except ValueError:
                files.bad(path, f"line {number} is not JSON")
                return


def git_fsck(home: Path) -> tuple[bool, str]:
    git_dir = home / "memory.git"
    done = subprocess.run(
        ["git", "--git-dir", str(git_dir), "fsck", "--strict"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    stale = sorted(str(p.relative_to(git_dir)) for p in git_dir.rglob("*.lock"))
    detail = (done.stdout + done.stderr).strip()
    if stale:
        detail += f"\nlock files left in memory.git: {', '.join(stale)}"
    return done.returncode == 0, detail


def memory_lines(workspace: Path) -> Counter[tuple[str, str]]:
    """(file, line) of every non-empty line of the three memory files, counted."""
    counts: Counter[tuple[str, str]] = Counter()
    for rel in MEMORY_FILES:
        path = workspace / rel
        if path.exists():
            text = path.read_text(encoding="utf-8", errors="replace")
            counts.update((rel, line.strip()) for line in text.splitlines() if line.strip())
    return counts


def duplicated_lines(workspace: Path, before: Counter[tuple[str, str]]) -> int:
    """Copies beyond the first of any non-empty line, not counting those the run started with."""
    now = memory_lines(workspace)
    return sum(max(0, n - max(1, before[key])) for key, n in now.items())


@dataclass
class Coverage:
    entries: int = 0
    dreamed: int = 0  # entries at or before the Dream cursor
    skipped: int = 0  # dreamed entries whose fact is not in memory/MEMORY.md
    repeated: int = 0  # dreamed entries whose fact is there more than once
    notes: list[str] = field(default_factory=list)


def coverage(workspace: Path) -> Coverage:
    """Every history entry Dream passed must have left its fact exactly once."""
    memory = workspace / "memory"
    store = HistoryStore(memory)
    entries: list[HistoryEntry] = list(reversed(list(store.iter_backwards())))
    dream_cursor = store.dream_cursor()
    lines = Counter(line for (rel, line) in memory_lines(workspace).elements())
    result = Coverage(entries=len(entries))
    expected = set()
    for entry in entries:
        fact = fact_line(entry.cursor, entry.timestamp, entry.session)
        expected.add(fact)
        if entry.cursor > dream_cursor:
            continue
        result.dreamed += 1
        if lines[fact] == 0:
            result.skipped += 1
            result.notes.append(f"skipped: history entry {entry.cursor} ({entry.session})")
        result.repeated += max(0, lines[fact] - 1)
    phantoms = [line for line in lines if line.startswith(FACT_PREFIX) and line not in expected]
    if phantoms:
        result.notes.append(f"{len(phantoms)} facts in memory name no history entry")
    if waiting := len(entries) - result.dreamed:
        result.notes.append(f"{waiting} history entries after the Dream cursor ({dream_cursor})")
    return result


def session_faults(home: Path, keys: list[str], expected: dict[str, list[str]]) -> list[str]:
    """A session is whole and in order when its user messages keep each sender's order, every
    reply answers the message just before it, and each message in `expected` is there once
    with its reply (at-least-once: a message may repeat right after itself)."""
    faults: list[str] = []
    store = SessionStore(home / "sessions")
    for key in keys:
        try:
            session = asyncio.run(store.get(key))
        except Exception as exc:
            faults.append(f"{key}: cannot load: {exc}")
            continue
        faults += _order_faults(key, session.messages, expected.get(key, []))
    return faults


def _order_faults(key: str, messages: list[dict[str, Any]], expected: list[str]) -> list[str]:
    faults: list[str] = []
    last_user: list[str] = []
    newest: dict[str, int] = {}  # per sender, the newest number seen
    answered: Counter[str] = Counter()
    for message in messages:
        matches = list(TOKEN_RE.finditer(str(message.get("content") or "")))
        found = [m.group(0) for m in matches]
        if message.get("role") == "user":
            last_user = found
            for m in matches:
                sender, number = m.group(1) + m.group(2), int(m.group(3))
                if number < newest.get(sender, 0):
                    faults.append(f"{key}: {m.group(0)} after a later message of its sender")
                newest[sender] = max(newest.get(sender, 0), number)
        elif message.get("role") == "assistant" and found:
            if not set(found) <= set(last_user):
                faults.append(f"{key}: the reply to {found} follows {last_user or 'no message'}")
            answered.update(set(found))
    faults += [f"{key}: {t} has no reply in the session" for t in expected if not answered[t]]
    return faults
