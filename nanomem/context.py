"""ContextBuilder: the system prompt (stable across turns) and the user message (with runtime)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path
from typing import Any

from nanomem.bus import InboundMessage
from nanomem.history import HistoryStore
from nanomem.skills import Skills
from nanomem.templates import Templates

MEMORY_FILES = {
    "soul": "SOUL.md",
    "user": "USER.md",
    "agents": "AGENTS.md",
    "memory": "memory/MEMORY.md",
}


class ContextBuilder:
    def __init__(
        self,
        workspace: Path,
        templates: Templates,
        skills: Skills,
        tool_names: list[str],
        history: HistoryStore | None = None,
        history_chars: int = 0,
    ) -> None:
        self.workspace = workspace
        self.templates = templates
        self.skills = skills
        self.tool_names = tool_names
        self.history = history
        self.history_chars = history_chars
        self._cache: dict[str, tuple[tuple[Any, ...], str]] = {}

    async def system_prompt(self, session_key: str) -> str:
        return await asyncio.to_thread(self.render_system_prompt, session_key)

    def render_system_prompt(self, session_key: str) -> str:
        """Rendered again only when memory files, skills or this chat's history entries
        change: same inputs, same bytes (so provider prompt caches keep working)."""
        entries = (
            self.history.recent(session_key, self.history_chars)
            if self.history is not None and self.history_chars
            else []
        )
        key = (self._files_key(), tuple(e.cursor for e in entries))
        cached = self._cache.get(session_key)
        if cached is not None and cached[0] == key:
            return cached[1]
        files = {name: self._read(rel) for name, rel in MEMORY_FILES.items()}
        prompt = self.templates.render(
            "system.md.j2",
            workspace=str(self.workspace),
            files=files,
            skills=self.skills.all(),
            tools=self.tool_names,
            history=entries,
        )
        if len(self._cache) > 1024:
            self._cache.clear()
        self._cache[session_key] = (key, prompt)
        return prompt

    def user_message(self, msg: InboundMessage, now: datetime | None = None) -> dict[str, Any]:
        """Runtime facts go here, not in the system prompt, and are stored with the message,
        so replayed history keeps its absolute timestamps and stays byte-identical."""
        when = (now or msg.timestamp).astimezone()
        runtime = self.templates.render(
            "runtime_context.md.j2",
            time=when.strftime("%Y-%m-%d %H:%M:%S %Z (UTC%z)"),
            weekday=when.strftime("%A"),
            channel=msg.channel,
            chat_id=msg.chat_id,
            sender=msg.metadata.get("sender_name", ""),
            media=list(msg.media),
        )
        return {"role": "user", "content": f"{runtime}\n\n{msg.content}"}

    def _read(self, relative: str) -> str:
        path = self.workspace / relative
        try:
            return path.read_text(encoding="utf-8").strip()
        except (FileNotFoundError, IsADirectoryError):
            return ""

    def _files_key(self) -> tuple[Any, ...]:
        paths = [self.workspace / rel for rel in MEMORY_FILES.values()]
        skills_dir = self.skills.directory
        if skills_dir.is_dir():
            paths.extend(sorted(skills_dir.glob("*/SKILL.md")))
        overrides = self.workspace / "templates"
        if overrides.is_dir():
            paths.extend(sorted(overrides.glob("*.j2")))
        stamps: list[tuple[str, int | None, int | None]] = []
        for path in paths:
            try:
                stat = path.stat()
                stamps.append((str(path), stat.st_mtime_ns, stat.st_size))
            except FileNotFoundError:
                stamps.append((str(path), None, None))
        return tuple(stamps)
