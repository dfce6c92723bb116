"""Dream: turns new history entries into durable knowledge in SOUL.md, USER.md and
memory/MEMORY.md, with small exact edits, one git commit per run, and nothing changed when
anything goes wrong.

One run at a time across processes (the home's Dream lock). A run edits a staging copy of the
files; only a finished run touches the live files, through the journal (dream_journal.py), so
a kill at any instant neither loses an edit nor applies one twice."""

from __future__ import annotations

import asyncio
import difflib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from loguru import logger
from pydantic import Field

from nanomem.agent import Templates, react
from nanomem.config import DreamSettings
from nanomem.durable import atomic_write_text
from nanomem.features.dream.evidence import trailers
from nanomem.features.dream.journal import DreamJournal, Edit, EditConflict, Staging, journal_of
from nanomem.features.dream.placeholder import placeholder_edit
from nanomem.features.dream.review import WAITING, DreamReview, PendingChange, rejection_notes
from nanomem.locks import FileLock, LockBusy, to_thread_to_the_end
from nanomem.memory import (
    TRACKED,
    Files,
    GitStore,
    HistoryEntry,
    HistoryStore,
    Version,
    clean_temp_files,
)
from nanomem.providers import (
    ModelOptions,
    Provider,
    ProviderError,
    Reply,
    TextSink,
    ToolCall,
    ToolChoice,
    charged_to,
)
from nanomem.text import untrusted_json
from nanomem.text.plural import plural
from nanomem.tools import OUTSIDE, Tool, ToolError, ToolRegistry, read_only_tool

BRIEF_HOLD_S = 5.0  # longer than any bookkeeping hold of the Dream lock
MemoryFile = Literal["SOUL.md", "USER.md", "memory/MEMORY.md"]
# Told each phase of a run as it begins: "reading 3 history entries", "analysing",
# "editing USER.md", "committing".
Progress = Callable[[str], None]
# "pending": the edits wait for the owner (dream.review = "ask"); "waiting": an earlier
# run's still do, so this one did nothing.
Status = Literal["changed", "unchanged", "nothing_new", "failed", "pending", "waiting"]


class DreamBusy(Exception):
    """Another Dream run (in any process) holds the lock."""


# Dream reads history only: a chat's latest messages are not in it until they are archived.
NOTHING_NEW = (
    "Nothing new to learn: nothing reached history since the last Dream. A conversation "
    "reaches history when it is consolidated (as it grows) or after /new; /dream learns from "
    "it then."
)


class DreamAborted(Exception):
    """A cap was hit or the edits were not surgical; the files are rolled back."""


@dataclass(frozen=True)
class DreamResult:
    status: Status
    entries: int = 0
    version: Version | None = None
    reason: str = ""
    pending: PendingChange | None = None

    def describe(self) -> str:
        if self.status == "waiting":
            return WAITING
        if self.pending is not None:
            return self.pending.describe()
        if self.status == "nothing_new":
            return NOTHING_NEW
        if self.status == "failed":
            return f"Dream failed and changed nothing: {self.reason}"
        if self.version is None:
            return f"Read {entry_count(self.entries)}; nothing worth changing in memory."
        lines = [f"Learned from {entry_count(self.entries)} ({self.version.short}):"]
        lines += [f"- {rel}: +{a} -{r}" for rel, (a, r) in sorted(self.version.files.items())]
        return "\n".join(lines)


def entry_count(count: int) -> str:
    return plural(count, "history entry", "history entries")


def _file_of(call: ToolCall) -> str:
    try:
        args = untrusted_json.loads(call.arguments or "{}")
    except ValueError:
        return ""
    return str(args.get("file") or "") if isinstance(args, dict) else ""


class MemoryTools:
    """The only tools a Dream run has: read and surgically edit the three memory files (their
    staging copies: the live files change only when the whole run has succeeded)."""

    def __init__(self, staging: Staging) -> None:
        self.staging = staging

    def registry(self) -> ToolRegistry:
        functions = (self.read_memory, self.edit_memory, self.append_memory)
        return ToolRegistry([Tool.from_function(f) for f in functions])

    @read_only_tool
    def read_memory(self, file: MemoryFile) -> str:
        """Read one memory file."""
        return self.staging.read(file) or "(empty file)"

    def edit_memory(
        self,
        file: MemoryFile,
        old_text: Annotated[str, Field(min_length=1, description="Exact text, occurring once")],
        new_text: Annotated[str, Field(description="Replacement (empty to delete)")],
    ) -> str:
        """Replace one exact occurrence of old_text in a memory file."""
        try:
            self.staging.apply(Edit(file, "edit", old_text, new_text))
        except EditConflict as exc:
            raise ToolError(f"{exc}; read the file and copy text exactly") from None
        return f"Edited {file}"

    def append_memory(
        self,
        file: MemoryFile,
        line: Annotated[str, Field(min_length=1, description="One line to add at the end")],
    ) -> str:
        """Append one line to a memory file."""
        self.staging.apply(Edit(file, "append", "", line))
        return f"Appended to {file}"


class TokenCap:
    """Counts the tokens of every call in a run and stops the run past its budget."""

    def __init__(self, inner: Provider, limit: int) -> None:
        self.inner = inner
        self.limit = limit
        self.used = 0

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        max_tokens: int | None = None,
        tool_choice: ToolChoice | None = None,
        on_text: TextSink | None = None,
        options: ModelOptions | None = None,
    ) -> Reply:
        if self.used >= self.limit:
            raise DreamAborted(f"the token cap ({self.limit}) was reached")
        reply = await self.inner.complete(
            messages,
            tools,
            max_tokens=max_tokens,
            tool_choice=tool_choice,
            on_text=on_text,
            options=options,
        )
        if reply.usage is not None:
            self.used += reply.usage.prompt_tokens + reply.usage.completion_tokens
        else:  # no usage reported: count what we sent, generously
            self.used += len(json.dumps(messages)) // 3
        return reply


class Dream:
    def __init__(
        self,
        *,
        history: HistoryStore,
        git: GitStore,
        provider: Provider,
        templates: Templates,
        workspace: Path,
        settings: DreamSettings,
        state_path: Path,
        lock: FileLock | None = None,
        journal_path: Path | None = None,
        groups_see_personal: bool = False,
    ) -> None:
        self.history, self.git, self.provider = history, git, provider
        self.groups_see_personal = groups_see_personal
        self.templates, self.workspace, self.settings = templates, workspace, settings
        self.state_path = state_path
        self.lock = lock or FileLock(state_path.parent / "locks" / "dream.lock")
        journal_path = journal_path or state_path.with_name("dream-journal.json")
        self.journal = DreamJournal(journal_path, git, history)
        self.review = DreamReview(
            state_path.with_name("dream-review.json"),
            state_path.with_name("dream-reviews.jsonl"),
            journal=self.journal,
            git=git,
            history=history,
            expire_h=settings.review_expire_h,
        )

    @property
    def running(self) -> bool:
        """A run of this process is going (another process's shows as DreamBusy)."""
        return self.lock.held

    def last_run(self) -> dict[str, Any] | None:
        try:
            data = untrusted_json.loads(self.state_path.read_text(encoding="utf-8"))
            return data if isinstance(data, dict) else None
        except (FileNotFoundError, ValueError):
            return None

    async def run(self, trigger: str = "manual", progress: Progress | None = None) -> DreamResult:
        try:
            await self.lock.acquire(wait_s=0)
        except LockBusy:
            raise DreamBusy from None
        try:
            result = await self._run(trigger, progress or (lambda phase: None))
            logger.info("dream ({}): {} {}", trigger, result.status, result.reason)
            await to_thread_to_the_end(self._record, trigger, result)
            return result
        finally:
            self.lock.release()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the Dream lock, so no run starts meanwhile (for a restore or a review decision;
        blocking: call in a worker thread). DreamBusy if a run is going. A run a crash
        interrupted is finished first, so the restore applies to what that run wrote."""
        try:
            # The review notice holds the lock a moment to mark itself sent; waiting that
            # out tells it apart from a run, which holds it far longer.
            self.lock.acquire_sync(wait_s=BRIEF_HOLD_S)
        except LockBusy:
            raise DreamBusy from None
        try:
            self._recover()
            yield
        finally:
            self.lock.release()

    def _recover(self) -> None:
        for folder in {self.state_path.parent, self.workspace, self.history.path.parent}:
            clean_temp_files(folder)
        self.journal.recover()

    async def _run(self, trigger: str, progress: Progress) -> DreamResult:
        await to_thread_to_the_end(self._recover)
        if await to_thread_to_the_end(self.review.current) is not None:
            return DreamResult("waiting")  # one pending change at a time
        # The cursor is read under the lock: another process's run may have just moved it.
        after = await asyncio.to_thread(self.history.dream_cursor)
        limit = self.settings.max_batch_size
        batch = await asyncio.to_thread(self.history.read_after, after, limit)
        if not batch:
            return DreamResult("nothing_new")
        # Group chats are shared rooms: what their members say never becomes the owner's memory.
        entries = [e for e in batch if self.groups_see_personal or not e.is_room]
        if not entries:
            await to_thread_to_the_end(self.history.advance_dream_cursor, batch[-1].cursor)
            return DreamResult("unchanged", len(batch))
        progress(f"reading {entry_count(len(entries))}")
        base_sha, base = await to_thread_to_the_end(self._base)
        staging = Staging(base)
        try:
            learning = self._learn(entries, staging, progress)
            with charged_to("", "dream"):  # the home's own work, for no chat
                analysis = await asyncio.wait_for(learning, self.settings.max_wall_s)
            self._check_surgical(base, staging.files())
            if (edit := placeholder_edit(staging)) is not None:
                staging.apply(edit)  # journalled like the model's edits, re-made on a rebase
        except (DreamAborted, ProviderError, TimeoutError) as exc:
            # The live files were never touched: dropping the staging copy is the rollback.
            reason = str(exc) or f"the time cap ({self.settings.max_wall_s:g} s) was reached"
            return DreamResult("failed", len(entries), reason=reason)
        cursor = batch[-1].cursor
        if staging.files() == base:
            # Advance also when nothing changed: a batch with nothing to learn must not stall.
            await to_thread_to_the_end(self.history.advance_dream_cursor, cursor)
            return DreamResult("unchanged", len(entries))
        final = {
            rel: (c or b"").decode("utf-8", errors="replace") for rel, c in staging.files().items()
        }
        read = (batch[0].cursor, cursor)
        evidence = trailers(read, entries, analysis, staging.edits, final)
        journal = journal_of(cursor, base_sha, staging, evidence)
        if self.settings.review == "ask":  # kept aside for the owner's decision
            told = trigger == "manual"  # a /dream's reply shows it: no separate notice
            hold = self.review.hold
            pending = await to_thread_to_the_end(hold, journal, base, len(entries), told)
            return DreamResult("pending", len(entries), pending=pending)
        progress("committing")
        try:
            version = await to_thread_to_the_end(self.journal.complete, journal)
        except EditConflict as exc:
            reason = (
                f"the memory files changed during the run and its edits no longer apply ({exc})"
            )
            return DreamResult("failed", len(entries), reason=reason)
        return DreamResult("changed" if version else "unchanged", len(entries), version)

    def _base(self) -> tuple[str | None, Files]:
        """The files a run starts from: edits made outside Dream are committed first."""
        with self.git.writing():
            self.git.commit_manual_edits()
            return self.git.head_sha(), self.git.read_workspace()

    async def _learn(
        self, entries: list[HistoryEntry], staging: Staging, progress: Progress
    ) -> str:
        """Edits `staging`; returns the analysis, whose citations are the run's evidence."""
        provider = TokenCap(self.provider, self.settings.max_tokens)
        files = {rel: staging.read(rel) for rel in TRACKED}
        rejected = await asyncio.to_thread(rejection_notes, self.templates, self.review)
        analyse = [
            {"role": "system", "content": self.templates.render("dream_system.md.j2")},
            {
                "role": "user",
                "content": self.templates.render(
                    "dream_analyse.md.j2", entries=entries, files=files
                )
                + rejected,
            },
        ]
        progress("analysing")
        analysis = await react(provider, analyse, None, 1, context=OUTSIDE)
        edit = [
            {"role": "system", "content": self.templates.render("dream_system.md.j2")},
            {
                "role": "user",
                "content": self.templates.render(
                    "dream_edit.md.j2", analysis=analysis.text or "", files=files
                ),
            },
        ]
        tools = MemoryTools(staging).registry()
        editing = ""

        async def report(call: ToolCall) -> None:
            nonlocal editing
            file = _file_of(call)
            if call.name != "read_memory" and file and file != editing:
                editing = file
                progress(f"editing {file}")

        steps = self.settings.max_iterations
        result = await react(provider, edit, tools, steps, context=OUTSIDE, on_tool_call=report)
        if result.text is None:
            raise DreamAborted(f"the step cap ({self.settings.max_iterations}) was reached")
        return analysis.text or ""

    def _check_surgical(self, before: Files, after: Files) -> None:
        share = self.settings.max_delete_share
        for rel in TRACKED:
            old = (before.get(rel) or b"").decode("utf-8", errors="replace").splitlines()
            new = (after.get(rel) or b"").decode("utf-8", errors="replace").splitlines()
            removed = sum(1 for line in difflib.ndiff(old, new) if line.startswith("- "))
            if removed > 2 and removed > share * max(1, len(old)):
                raise DreamAborted(
                    f"the edits would delete {removed} of {len(old)} lines of {rel} "
                    f"(more than {share:.0%}); rolled back"
                )

    def _record(self, trigger: str, result: DreamResult) -> None:
        state = {
            "last_run": datetime.now(UTC).isoformat(timespec="seconds"),
            "trigger": trigger,
            "status": result.status,
            "entries": result.entries,
            "version": result.version.sha if result.version else None,
            "reason": result.reason,
        }
        atomic_write_text(self.state_path, json.dumps(state, indent=2) + "\n")
