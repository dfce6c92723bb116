"""Dream: turns new history entries into durable knowledge in SOUL.md, USER.md and
memory/MEMORY.md, with small exact edits, one git commit per run, and a full rollback when
anything goes wrong."""

from __future__ import annotations

import asyncio
import difflib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from loguru import logger
from pydantic import Field

from nanomem.config import DreamSettings
from nanomem.durable import atomic_write_text
from nanomem.gitstore import TRACKED, Files, GitStore, Version
from nanomem.history import HistoryEntry, HistoryStore
from nanomem.provider import Provider, ProviderError, Reply, ToolChoice
from nanomem.react import react
from nanomem.templates import Templates
from nanomem.tools import Tool, ToolError, ToolRegistry, read_only_tool

MemoryFile = Literal["SOUL.md", "USER.md", "memory/MEMORY.md"]
Status = Literal["changed", "unchanged", "nothing_new", "failed"]


class DreamBusy(Exception):
    """Another Dream run holds the lock."""


class DreamAborted(Exception):
    """A cap was hit or the edits were not surgical; the files are rolled back."""


@dataclass(frozen=True)
class DreamResult:
    status: Status
    entries: int = 0
    version: Version | None = None
    reason: str = ""

    def describe(self) -> str:
        if self.status == "nothing_new":
            return "Nothing new to learn."
        if self.status == "failed":
            return f"Dream failed and changed nothing: {self.reason}"
        if self.version is None:
            return f"Read {self.entries} history entries; nothing worth changing in memory."
        lines = [f"Learned from {self.entries} history entries ({self.version.short}):"]
        lines += [f"- {rel}: +{a} -{r}" for rel, (a, r) in sorted(self.version.files.items())]
        return "\n".join(lines)


class MemoryTools:
    """The only tools a Dream run has: read and surgically edit the three memory files."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace

    def registry(self) -> ToolRegistry:
        functions = (self.read_memory, self.edit_memory, self.append_memory)
        return ToolRegistry([Tool.from_function(f) for f in functions])

    @read_only_tool
    def read_memory(self, file: MemoryFile) -> str:
        """Read one memory file."""
        path = self.workspace / file
        return path.read_text(encoding="utf-8") if path.exists() else "(empty file)"

    def edit_memory(
        self,
        file: MemoryFile,
        old_text: Annotated[str, Field(min_length=1, description="Exact text, occurring once")],
        new_text: Annotated[str, Field(description="Replacement (empty to delete)")],
    ) -> str:
        """Replace one exact occurrence of old_text in a memory file."""
        path = self.workspace / file
        content = path.read_text(encoding="utf-8") if path.exists() else ""
        count = content.count(old_text)
        if count != 1:
            where = "was not found" if count == 0 else f"occurs {count} times"
            raise ToolError(f"old_text {where} in {file}; read the file and copy text exactly")
        atomic_write_text(path, content.replace(old_text, new_text, 1))
        return f"Edited {file}"

    def append_memory(
        self,
        file: MemoryFile,
        line: Annotated[str, Field(min_length=1, description="One line to add at the end")],
    ) -> str:
        """Append one line to a memory file."""
        path = self.workspace / file
        content = path.read_text(encoding="utf-8") if path.exists() else ""
        if content and not content.endswith("\n"):
            content += "\n"
        atomic_write_text(path, content + line.strip("\n") + "\n")
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
    ) -> Reply:
        if self.used >= self.limit:
            raise DreamAborted(f"the token cap ({self.limit}) was reached")
        reply = await self.inner.complete(
            messages, tools, max_tokens=max_tokens, tool_choice=tool_choice
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
    ) -> None:
        self.history, self.git, self.provider = history, git, provider
        self.templates, self.workspace, self.settings = templates, workspace, settings
        self.state_path = state_path
        self._lock = asyncio.Lock()

    @property
    def running(self) -> bool:
        return self._lock.locked()

    def last_run(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.state_path.read_text(encoding="utf-8"))
            return data if isinstance(data, dict) else None
        except (FileNotFoundError, ValueError):
            return None

    async def run(self, trigger: str = "manual") -> DreamResult:
        if self._lock.locked():
            raise DreamBusy
        async with self._lock:
            result = await self._run()
            logger.info("dream ({}): {} {}", trigger, result.status, result.reason)
            await asyncio.to_thread(self._record, trigger, result)
            return result

    async def _run(self) -> DreamResult:
        after = self.history.dream_cursor()
        limit = self.settings.max_batch_size
        entries = await asyncio.to_thread(self.history.read_after, after, limit)
        if not entries:
            return DreamResult("nothing_new")
        await asyncio.to_thread(self.git.commit_manual_edits)
        before = await asyncio.to_thread(self.git.read_workspace)
        try:
            await asyncio.wait_for(self._learn(entries), self.settings.max_wall_s)
            after_files = await asyncio.to_thread(self.git.read_workspace)
            self._check_surgical(before, after_files)
        except (DreamAborted, ProviderError, TimeoutError) as exc:
            await asyncio.to_thread(self._roll_back, before)
            reason = str(exc) or f"the time cap ({self.settings.max_wall_s:g} s) was reached"
            return DreamResult("failed", len(entries), reason=reason)
        except BaseException:
            await asyncio.shield(asyncio.to_thread(self._roll_back, before))
            raise
        version = await asyncio.to_thread(self.git.commit_if_changed, "dream")
        # Advance also when nothing changed: a batch with nothing to learn must not stall.
        await asyncio.to_thread(self.history.advance_dream_cursor, entries[-1].cursor)
        return DreamResult("changed" if version else "unchanged", len(entries), version)

    async def _learn(self, entries: list[HistoryEntry]) -> None:
        provider = TokenCap(self.provider, self.settings.max_tokens)
        files = {rel: self._read(rel) for rel in TRACKED}
        analyse = [
            {"role": "system", "content": self.templates.render("dream_system.md.j2")},
            {
                "role": "user",
                "content": self.templates.render(
                    "dream_analyse.md.j2", entries=entries, files=files
                ),
            },
        ]
        analysis = await react(provider, analyse, None, 1)
        edit = [
            {"role": "system", "content": self.templates.render("dream_system.md.j2")},
            {
                "role": "user",
                "content": self.templates.render(
                    "dream_edit.md.j2", analysis=analysis.text or "", files=files
                ),
            },
        ]
        tools = MemoryTools(self.workspace).registry()
        result = await react(provider, edit, tools, self.settings.max_iterations)
        if result.text is None:
            raise DreamAborted(f"the step cap ({self.settings.max_iterations}) was reached")

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

    def _roll_back(self, before: Files) -> None:
        for rel, content in before.items():
            path = self.workspace / rel
            if content is None:
                path.unlink(missing_ok=True)
            elif not path.exists() or path.read_bytes() != content:
                atomic_write_text(path, content.decode("utf-8", errors="replace"))

    def _read(self, rel: str) -> str:
        path = self.workspace / rel
        return path.read_text(encoding="utf-8") if path.exists() else ""

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
