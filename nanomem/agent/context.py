"""ContextBuilder: the system prompt (stable across turns) and the user message (with runtime)."""

from __future__ import annotations

import asyncio
import base64
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loguru import logger

from nanomem.agent.bus import InboundMessage
from nanomem.agent.documents import documents_text
from nanomem.agent.skills import Skills
from nanomem.agent.templates import Templates
from nanomem.audience import audience_of, room_folder
from nanomem.memory import HistoryStore
from nanomem.thread_batch import ThreadBatch
from nanomem.tools import (
    IMAGE_TYPES,
    MAX_IMAGE_BYTES,
    Image,
    ToolError,
    read_checked,
    read_text_below,
)

if TYPE_CHECKING:
    from nanomem.config import DocumentSettings

READING_STOPPED = "[the documents were not read: /stop came while they were being read]"
PROMPT_CACHE_SIZE = 256
PERSONAL_FILES = ("user", "memory")  # never in a shared room's prompt
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
        vision: Callable[[], bool] | None = None,
        groups_see_personal: bool = False,
        documents: DocumentSettings | None = None,
    ) -> None:
        self.workspace = workspace
        self.templates = templates
        self.skills = skills
        self.tool_names = tool_names
        self.sections: list[str] = []  # templates the features add to the prompt (agent/feature.py)
        self.history = history
        self.history_chars = history_chars
        self.vision = vision
        self.groups_see_personal = groups_see_personal
        self.document_limits = documents  # None: tools.documents' defaults
        self._reading: dict[str, asyncio.Task[str]] = {}  # by chat, while a message is saved
        # Keyed by what the prompt is made of, not by chat: every chat without history
        # entries of its own shares one rendering.
        self._cache: OrderedDict[tuple[Any, ...], str] = OrderedDict()
        self._cache_lock = threading.Lock()  # renders run in worker threads
        self._renders = ThreadBatch()
        self._memory_paths = [str(workspace / rel) for rel in MEMORY_FILES.values()]
        self._skills_dir = str(skills.directory)
        self._overrides_dir = str(workspace / "templates")

    async def system_prompt(self, session_key: str, room: bool) -> str:
        """`room`: a shared room, by its channel's word (as the turn or the session has it)."""
        # Usually a few stats and a cache hit: turns starting together share a thread hop.
        return await self._renders.run(self.render_system_prompt, session_key, room)

    def render_system_prompt(self, session_key: str, room: bool) -> str:
        """Rendered again only when memory files, skills or this chat's history entries
        change: same inputs, same bytes (so provider prompt caches keep working)."""
        entries = (
            self.history.recent(session_key, self.history_chars)
            if self.history is not None and self.history_chars
            else []
        )
        personal = audience_of(session_key, room, self.groups_see_personal).personal
        key = (self._files_key(), tuple(e.cursor for e in entries), personal)
        with self._cache_lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        files = {
            name: self._read(rel) if personal or name not in PERSONAL_FILES else ""
            for name, rel in MEMORY_FILES.items()
        }
        shared: dict[str, Any] = {
            "workspace": str(self.workspace),
            "tools": self.tool_names,
            "shared_room": not personal,
        }
        sections = [self.templates.render(name, **shared).strip() for name in self.sections]
        prompt = self.templates.render(
            "system.md.j2",
            files=files,
            skills=self.skills.all(),
            history=entries,
            sections=[section for section in sections if section],
            **shared,
        )
        with self._cache_lock:
            self._cache[key] = prompt
            if len(self._cache) > PROMPT_CACHE_SIZE:
                self._cache.popitem(last=False)
        return prompt

    async def with_images(self, user: dict[str, Any], media: tuple[str, ...]) -> dict[str, Any]:
        """The message as sent to a vision model: the text plus attached images inline.

        The session keeps the text form (the paths are in its runtime header), so a photo is
        sent once, not with every later turn."""
        images = [m for m in media if Path(m).suffix.lower() in IMAGE_TYPES]
        if not images or self.vision is None or not await asyncio.to_thread(self.vision):
            return user
        parts: list[dict[str, Any]] = [{"type": "text", "text": user["content"]}]
        for relative in images:
            data = await asyncio.to_thread(self._image_data_url, relative)
            if data:
                parts.append({"type": "image_url", "image_url": {"url": data}})
        return {**user, "content": parts} if len(parts) > 1 else user

    async def tool_images(self, images: tuple[Image, ...]) -> dict[str, Any] | None:
        """The images tools returned, as one user message for the next model call (OpenAI's
        format takes no image in a `tool` message); None for a model that takes no images.
        Sent with that call only: the session keeps the tools' text, which names the files."""
        if not images or self.vision is None or not await asyncio.to_thread(self.vision):
            return None
        text = self.templates.render("tool_images.md.j2", paths=[i.path for i in images])
        parts: list[dict[str, Any]] = [{"type": "text", "text": text.strip()}]
        for image in images:
            encoded = base64.b64encode(image.data).decode("ascii")
            url = f"data:{image.mime};base64,{encoded}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        return {"role": "user", "content": parts}

    def _image_data_url(self, relative: str) -> str | None:
        root = self.workspace.resolve()
        path = (root / relative).resolve()
        if not path.is_relative_to(root):
            return None
        try:  # a group's folder is its own: what it swapped in (a link) is not sent
            data = read_checked(root, path, relative, MAX_IMAGE_BYTES)
        except ToolError:
            return None
        encoded = base64.b64encode(data).decode("ascii")
        return f"data:{IMAGE_TYPES[path.suffix.lower()]};base64,{encoded}"

    async def documents(self, media: tuple[str, ...], limit: int, key: str = "") -> str:
        """The text of the documents a message carries (agent/documents.py), for
        `user_message`; read and parsed off the event loop. `stop_reading(key)` ends it."""
        if not media:
            return ""
        if self.document_limits is None:
            from nanomem.config import DocumentSettings

            self.document_limits = DocumentSettings()
        reading = asyncio.ensure_future(
            documents_text(self.workspace, media, limit, self.document_limits)
        )
        self._reading[key] = reading
        try:
            return await reading
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if not reading.cancelled() or (me is not None and me.cancelling()):
                raise  # not stop_reading: the caller itself is being cancelled
            return READING_STOPPED
        finally:
            if self._reading.get(key) is reading:
                del self._reading[key]

    def stop_reading(self, key: str) -> None:
        """A /stop while the message is saved: its documents' parsers are killed."""
        if (reading := self._reading.get(key)) is not None:
            reading.cancel()

    def user_message(
        self, msg: InboundMessage, now: datetime | None = None, documents: str = ""
    ) -> dict[str, Any]:
        """Runtime facts go here, not in the system prompt, and are stored with the message,
        so replayed history keeps its absolute timestamps and stays byte-identical. So is the
        text of its documents: what the model saw of them is what a retry sees."""
        when = (now or msg.timestamp).astimezone()
        runtime = self.templates.render(
            "runtime_context.md.j2",
            time=when.strftime("%Y-%m-%d %H:%M:%S %Z (UTC%z)"),
            weekday=when.strftime("%A"),
            channel=msg.channel,
            chat_id=msg.chat_id,
            sender=msg.sender.name if msg.sender.shared_room else "",  # tells members apart
            media=[self._as_the_tools_see_it(msg, m) for m in msg.media],
        )
        content = f"{runtime}\n\n{msg.content}"
        return {"role": "user", "content": f"{content}\n\n{documents}" if documents else content}

    def _as_the_tools_see_it(self, msg: InboundMessage, relative: str) -> str:
        """A group's file tools start in its own folder: its media is named from there."""
        room = room_folder(self.workspace, msg.session_key, msg.sender.shared_room)
        if room is None:
            return relative
        path = self.workspace / relative
        return str(path.relative_to(room)) if path.is_relative_to(room) else relative

    def _read(self, relative: str) -> str:
        try:
            return (read_text_below(self.workspace, relative) or "").strip()
        except ToolError as exc:  # a link (planted by a command?): left out, said in the log
            logger.warning("prompt: {} is left out: {}", relative, exc)
            return ""

    def _files_key(self) -> tuple[Any, ...]:
        """Size and mtime of every file the prompt is made of; asked on every turn, so plain
        os calls on prepared paths (pathlib's glob and stat cost ~5x as much here)."""
        paths = list(self._memory_paths)
        paths += _files_below(self._skills_dir, lambda entry: f"{entry}/SKILL.md")
        paths += _files_below(self._overrides_dir, _if_template)
        return tuple(_stamp(path) for path in paths)


def _files_below(directory: str, pick: Callable[[str], str | None]) -> list[str]:
    try:
        with os.scandir(directory) as entries:
            names = sorted(entry.path for entry in entries)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [path for name in names if (path := pick(name)) is not None]


def _if_template(path: str) -> str | None:
    return path if path.endswith(".j2") else None


def _stamp(path: str) -> tuple[str, int | None, int | None]:
    try:
        stat = os.stat(path)  # noqa: PTH116 (see _files_key)
    except (FileNotFoundError, NotADirectoryError):
        return (path, None, None)
    return (path, stat.st_mtime_ns, stat.st_size)
