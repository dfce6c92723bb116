"""Dream review (`dream.review = "ask"`): a run's edits wait as a pending change until the
owner approves or rejects them.

The pending change is the run's journal (dream_journal.py) kept aside in
`<home>/dream-review.json` instead of being applied, so approving it commits exactly what an
`auto` run would have. Decisions are appended to `<home>/dream-reviews.jsonl`; rejected ones
go into the next runs' analyse prompt as notes, so the same change is not proposed again.

Everything here is blocking and runs under the home's Dream lock (a worker thread). Each step
is recoverable: a decision is recorded before it is carried out (a rejection) or recognised by
its commit (an approval), so a kill at any instant neither loses nor repeats one.
"""

from __future__ import annotations

import difflib
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from loguru import logger

from nanomem.agent import Button, Templates, fenced
from nanomem.durable import append_lines, atomic_write_text, fsync_dir
from nanomem.features.dream.journal import CURSOR_TRAILER, DreamJournal, EditConflict, Journal
from nanomem.memory import Files, GitStore, HistoryStore, Version, describe_stats
from nanomem.text import untrusted_json
from nanomem.text.plural import plural

REVIEW_VERSION = 1
Decision = Literal["approved", "rejected", "expired", "dropped"]
NOTES_KEPT = 5  # rejected changes the analyse prompt is reminded of
NOTE_LINES = 20  # changed lines quoted per rejected change
DIFF_CHARS = 3000  # of a pending change's diff in a chat message
NOTHING_WAITING = "No memory change is waiting for a decision."
WAITING = (
    "A memory change is waiting for your decision (/dream-approve or /dream-reject [reason]); "
    "Dream learns more once it is decided."
)


class ReviewError(Exception):
    """A decision that cannot be made (nothing waiting, an old id); safe to show."""


@dataclass
class PendingChange:
    id: str
    created: str  # ISO time, UTC
    entries: int  # history entries the run read
    journal: Journal  # what approving applies
    diff: str  # unified diff against the files the run started from
    stats: dict[str, tuple[int, int]]  # file → (added, removed)
    notified: bool = False  # told on the owner's personal channel
    expire_h: float = 72.0  # dropped unanswered after this long

    @property
    def summary(self) -> str:
        return describe_stats(self.stats)

    def buttons(self) -> tuple[Button, ...]:
        return (
            Button("Approve", f"/dream-approve {self.id}"),
            Button("Reject", f"/dream-reject {self.id}"),
        )

    def describe(self, max_diff_chars: int | None = DIFF_CHARS) -> str:
        """None: the whole diff (what is approved must be readable whole somewhere)."""
        diff = self.diff
        if max_diff_chars is not None and len(diff) > max_diff_chars:
            cut = diff[:max_diff_chars].rsplit("\n", 1)[0]
            diff = f"{cut}\n… (cut: /dream-log {self.id} shows all of it)"
        read = plural(self.entries, "history entry", "history entries")
        return (
            f"Dream prepared a memory change from {read} "
            f"(`{self.id}`, {self.created[:16].replace('T', ' ')} UTC); it waits for your "
            f"decision:\n{self.summary}\n\n{fenced(diff.rstrip(), 'diff')}\n"
            f"/dream-approve to keep it, /dream-reject [reason] to drop it "
            f"(dropped unanswered after {self.expire_h:g} h)."
        )

    def to_json(self) -> str:
        data = {
            "v": REVIEW_VERSION,
            "id": self.id,
            "created": self.created,
            "entries": self.entries,
            "journal": untrusted_json.loads(self.journal.to_json()),
            "diff": self.diff,
            "stats": {rel: list(counts) for rel, counts in self.stats.items()},
            "notified": self.notified,
            "expire_h": self.expire_h,
        }
        return json.dumps(data, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> PendingChange:
        data: dict[str, Any] = untrusted_json.loads(text)
        stats = {rel: (int(a), int(r)) for rel, (a, r) in data["stats"].items()}
        journal = Journal.from_json(json.dumps(data["journal"]))
        return cls(
            str(data["id"]),
            str(data["created"]),
            int(data["entries"]),
            journal,
            str(data["diff"]),
            stats,
            bool(data.get("notified")),
            float(data.get("expire_h") or 72.0),
        )


def diff_of(before: Files, after: Files) -> tuple[str, dict[str, tuple[int, int]]]:
    """A unified diff of the memory files, and its +/- counts per file."""
    parts: list[str] = []
    stats: dict[str, tuple[int, int]] = {}
    for rel in sorted(after):
        old = (before.get(rel) or b"").decode("utf-8", errors="replace").splitlines()
        new = (after.get(rel) or b"").decode("utf-8", errors="replace").splitlines()
        lines = list(difflib.unified_diff(old, new, f"a/{rel}", f"b/{rel}", lineterm=""))
        if not lines:
            continue
        parts += lines
        added = sum(1 for line in lines[2:] if line.startswith("+"))
        removed = sum(1 for line in lines[2:] if line.startswith("-"))
        stats[rel] = (added, removed)
    return "\n".join(parts) + "\n", stats


class DreamReview:
    def __init__(
        self,
        pending_path: Path,
        log_path: Path,
        *,
        journal: DreamJournal,
        git: GitStore,
        history: HistoryStore,
        expire_h: float,
    ) -> None:
        self.pending_path, self.log_path = pending_path, log_path
        self.journal, self.git, self.history = journal, git, history
        self.expire_h = expire_h

    # -- a run's side (under the Dream lock) ----------------------------------------------

    def hold(self, journal: Journal, base: Files, entries: int, notified: bool) -> PendingChange:
        """Keep a finished run's edits aside instead of applying them."""
        diff, stats = diff_of(base, journal.contents())
        created = datetime.now(UTC).isoformat(timespec="seconds")
        pending = PendingChange(
            uuid.uuid4().hex[:8], created, entries, journal, diff, stats, notified, self.expire_h
        )
        atomic_write_text(self.pending_path, pending.to_json() + "\n", mode=0o600)
        logger.info("dream: change {} waits for the owner ({})", pending.id, pending.summary)
        return pending

    def current(self) -> PendingChange | None:
        """The change waiting for a decision, after finishing a decision a kill interrupted
        and dropping one that waited longer than dream.review_expire_h."""
        pending = self.peek()
        if pending is None:
            return None
        decided = self._decision(pending.id)
        if pending.journal.cursor <= self.history.dream_cursor():
            if decided is None:  # approved, committed and consumed; killed before recording it
                self._record(pending, "approved", version=self._head_if_consumed(pending))
            self._drop()
            return None
        if decided == "rejected":  # recorded, then killed before the cursor moved
            self.history.advance_dream_cursor(pending.journal.cursor)
            self._drop()
            return None
        created = datetime.fromisoformat(pending.created)
        if datetime.now(UTC) - created > timedelta(hours=self.expire_h):
            logger.warning(
                "dream: change {} waited more than {:g} h without a decision; dropped "
                "(its history is dreamed again)",
                pending.id,
                self.expire_h,
            )
            self._record(pending, "expired")
            self._drop()
            return None
        return pending

    # -- the owner's decisions (under the Dream lock) --------------------------------------

    def approve(self, wanted: str = "") -> tuple[PendingChange, Version | None]:
        """Apply and commit the waiting change exactly as an `auto` run would have."""
        pending = self._chosen(wanted)
        try:
            version = self.journal.complete(pending.journal)
        except EditConflict as exc:
            self._record(pending, "dropped", reason=f"no longer applies: {exc}")
            self._drop()
            raise ReviewError(
                "The memory files changed since this change was prepared and its edits no "
                "longer apply; it was dropped and its history is dreamed again next time."
            ) from None
        self._record(pending, "approved", version=version.sha if version else None)
        self._drop()
        return pending, version

    def reject(self, wanted: str = "", reason: str = "") -> PendingChange:
        """Keep the live files, consume the history, remember why."""
        pending = self._chosen(wanted)
        self._record(pending, "rejected", reason=reason)  # first: the reason must survive
        self.history.advance_dream_cursor(pending.journal.cursor)
        self._drop()
        return pending

    def mark_notified(self, change_id: str) -> bool:
        """Note that the owner was told; False when that change no longer waits."""
        pending = self.peek()
        if pending is None or pending.id != change_id:
            return False
        pending.notified = True
        atomic_write_text(self.pending_path, pending.to_json() + "\n", mode=0o600)
        return True

    # -- reading (no lock needed: every file is replaced atomically or appended) -----------

    def peek(self) -> PendingChange | None:
        try:
            return PendingChange.from_json(self.pending_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:  # written atomically: not expected
            logger.error("dream: unreadable review {} ({}); ignored", self.pending_path, exc)
            return None

    def decisions(self, limit: int = 10) -> list[dict[str, Any]]:
        """The latest decisions, newest first."""
        try:
            raw = self.log_path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        records = []
        for line in raw:
            try:
                record = untrusted_json.loads(line)
            except ValueError:
                continue  # a torn last line from a crash
            if isinstance(record, dict) and "id" in record:
                records.append(record)
        return records[::-1][:limit]

    def rejections(self) -> list[dict[str, Any]]:
        """The latest rejected changes, oldest first, for the analyse prompt."""
        rejected = [r for r in self.decisions(limit=200) if r.get("status") == "rejected"]
        return rejected[:NOTES_KEPT][::-1]

    # -- internals ---------------------------------------------------------------------------

    def _chosen(self, wanted: str) -> PendingChange:
        pending = self.current()
        if pending is None:
            raise ReviewError(NOTHING_WAITING)
        if wanted and not pending.id.startswith(wanted.lower()):
            raise ReviewError(
                f"Change {wanted} is no longer waiting; the one waiting is `{pending.id}`."
            )
        return pending

    def _decision(self, change_id: str) -> str | None:
        for record in self.decisions(limit=50):
            if record.get("id") == change_id:
                return str(record.get("status"))
        return None

    def _head_if_consumed(self, pending: PendingChange) -> str | None:
        trailer = self.git.head_trailer(CURSOR_TRAILER)
        return self.git.head_sha() if trailer == str(pending.journal.cursor) else None

    def _record(
        self,
        pending: PendingChange,
        status: Decision,
        *,
        reason: str = "",
        version: str | None = None,
    ) -> None:
        changed = [
            line
            for line in pending.diff.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---"))
        ]
        record = {
            "v": REVIEW_VERSION,
            "id": pending.id,
            "status": status,
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "created": pending.created,
            "summary": pending.summary,
            "reason": reason,
            "version": version,
            "lines": changed[:NOTE_LINES],
        }
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        append_lines(self.log_path, [json.dumps(record, ensure_ascii=False)])

    def _drop(self) -> None:
        self.pending_path.unlink(missing_ok=True)
        fsync_dir(self.pending_path.parent)


def rejection_notes(templates: Templates, review: DreamReview) -> str:
    """The analyse prompt's reminder of what the owner rejected ("" when nothing was)."""
    rejected = review.rejections()
    if not rejected:
        return ""
    return "\n\n" + templates.render("dream_rejected.md.j2", rejections=rejected).strip() + "\n"
