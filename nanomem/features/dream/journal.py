"""A Dream run's result as one recoverable step: journal → files → commit → cursor.

A run edits a staging copy (see features/dream/dream.py), never the live files. Only when it
succeeded are its new contents, the edits that made them, the base version and the cursor they
consume written to a journal (atomically, fsynced); then the live files are written, committed
with a `Dream-Cursor: <n>` trailer, the cursor advances, and the journal goes. Each step is
idempotent, so the next run (or restore) finishes a journal that a kill interrupted at any
instant: no edit is lost, none is applied twice.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from loguru import logger

from nanomem.durable import atomic_write_text, fsync_dir
from nanomem.memory import Files, GitStore, HistoryStore, Version
from nanomem.text import untrusted_json

JOURNAL_VERSION = 1
CURSOR_TRAILER = "Dream-Cursor"


class EditConflict(Exception):
    """The memory files changed during the run, and the run's edits no longer apply."""


@dataclass(frozen=True)
class Edit:
    file: str
    kind: Literal["edit", "append"]
    old: str  # the exact text replaced ("" for an append)
    new: str  # its replacement, or the appended line


def apply_edit(content: str, edit: Edit) -> str:
    """`content` with `edit` made; an edit's old text must occur exactly once."""
    if edit.kind == "append":
        if content and not content.endswith("\n"):
            content += "\n"
        return content + edit.new.strip("\n") + "\n"
    count = content.count(edit.old)
    if count != 1:
        where = "was not found" if count == 0 else f"occurs {count} times"
        raise EditConflict(f"old_text {where} in {edit.file}")
    return content.replace(edit.old, edit.new, 1)


class Staging:
    """The memory files as a run sees and edits them, and the edits it made (tool calls of one
    step run in parallel threads: the guard keeps each read-modify-write whole)."""

    def __init__(self, base: Files) -> None:
        self.base = base
        self.texts = {rel: (c or b"").decode("utf-8", errors="replace") for rel, c in base.items()}
        self.edits: list[Edit] = []
        self._guard = threading.Lock()

    def read(self, rel: str) -> str:
        with self._guard:
            return self.texts[rel]

    def apply(self, edit: Edit) -> None:
        with self._guard:
            self.texts[edit.file] = apply_edit(self.texts[edit.file], edit)
            self.edits.append(edit)

    def files(self) -> Files:
        """The staged contents; files the run left as they were keep their base form."""
        files: Files = {}
        for rel, content in self.base.items():
            text = self.texts[rel]
            unchanged = text == (content or b"").decode("utf-8", errors="replace")
            files[rel] = content if unchanged else text.encode("utf-8")
        return files


@dataclass
class Journal:
    cursor: int  # the history cursor these edits consume
    base: str | None  # the version they were made on
    files: dict[str, str | None]  # the new contents of every tracked file
    edits: list[Edit] = field(default_factory=list)
    # Trailer lines naming the history entries the edits came from (see features/dream/evidence.py).
    evidence: list[str] = field(default_factory=list)
    v: int = JOURNAL_VERSION

    def contents(self) -> Files:
        return {rel: None if t is None else t.encode("utf-8") for rel, t in self.files.items()}

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> Journal:
        data: dict[str, Any] = untrusted_json.loads(text)
        edits = [Edit(**e) for e in data.get("edits", [])]
        evidence = [str(line) for line in data.get("evidence", [])]
        return cls(int(data["cursor"]), data.get("base"), dict(data["files"]), edits, evidence)


def journal_of(
    cursor: int, base: str | None, staging: Staging, evidence: list[str] | None = None
) -> Journal:
    files = {rel: None if c is None else c.decode("utf-8") for rel, c in staging.files().items()}
    return Journal(cursor, base, files, list(staging.edits), list(evidence or []))


class DreamJournal:
    """Applies journals; blocking (call through to_thread), under the Dream lock."""

    def __init__(self, path: Path, git: GitStore, history: HistoryStore) -> None:
        self.path, self.git, self.history = path, git, history

    def complete(self, journal: Journal) -> Version | None:
        """Journal, write, commit and consume `journal`; EditConflict leaves nothing behind."""
        with self.git.writing():
            atomic_write_text(self.path, journal.to_json() + "\n", mode=0o600)
            return self._finish(journal)

    def recover(self) -> None:
        """Finish what a killed run left: a journal, or a commit whose cursor was not saved."""
        with self.git.writing():
            cursor = self.history.dream_cursor()
            journal = self._load()
            if journal is not None:
                if journal.cursor <= cursor:
                    self._drop()  # killed after consuming it, before deleting it
                    return
                logger.warning(
                    "dream: finishing a run a crash interrupted (cursor {})", journal.cursor
                )
                try:
                    self._finish(journal)
                except EditConflict as exc:
                    logger.warning(
                        "dream: the interrupted run no longer applies ({}); dropped", exc
                    )
                return
            committed = _int(self.git.head_trailer(CURSOR_TRAILER))
            if committed is not None and committed > cursor:
                logger.warning(
                    "dream: the last commit consumed history up to {}; cursor saved", committed
                )
                self.history.advance_dream_cursor(committed)

    def _finish(self, journal: Journal) -> Version | None:
        """Idempotent from any point a kill could have left it at; holds the memory lock."""
        if _int(self.git.head_trailer(CURSOR_TRAILER)) == journal.cursor:
            version = None  # committed already; only the cursor was missing
        else:
            journal = self._rebase(journal)
            self.git.write_files(journal.contents())
            trailer = "\n".join([f"{CURSOR_TRAILER}: {journal.cursor}", *journal.evidence])
            version = self.git.commit_files(journal.contents(), "dream", trailer)
        self.history.advance_dream_cursor(journal.cursor)
        self._drop()
        return version

    def _rebase(self, journal: Journal) -> Journal:
        """If someone changed the live files since the run began (the person, or the chat
        agent), keep that change as a `manual edit` and make the run's edits again on top."""
        live = self.git.read_workspace()
        base = self.git.files_at(journal.base)
        target = journal.contents()
        foreign = [rel for rel in live if live[rel] not in (base.get(rel), target.get(rel))]
        if not foreign:
            return journal  # each file is as it was, or already written: carry on
        logger.info("dream: {} changed during the run; re-applying its edits", ", ".join(foreign))
        # A file this journal already wrote counts as untouched: its edits are made again below.
        manual = {rel: base.get(rel) if live[rel] == target.get(rel) else live[rel] for rel in live}
        self.git.commit_files(manual, "manual edit")
        staging = Staging(manual)
        try:
            for edit in journal.edits:
                staging.apply(edit)
        except EditConflict:
            self._drop()
            raise
        rebased = journal_of(journal.cursor, self.git.head_sha(), staging, journal.evidence)
        atomic_write_text(self.path, rebased.to_json() + "\n", mode=0o600)
        return rebased

    def _load(self) -> Journal | None:
        try:
            return Journal.from_json(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:  # written atomically: not expected
            logger.error("dream: unreadable journal {} ({}); ignored", self.path, exc)
            self._drop()
            return None

    def _drop(self) -> None:
        self.path.unlink(missing_ok=True)
        fsync_dir(self.path.parent)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
