"""Workspace file tools: paths are resolved for real and compared by parts, not by prefix.

In a shared room (a group chat) the tools' root is the room's own folder (audience.room_folder),
known from the call's ToolContext:
its media and its notes, nothing of the owner's and nothing that enters a system prompt. In every
chat a file with a second name (a hard link) is refused: no path check can see where it leads.
"""

from __future__ import annotations

import asyncio
import os
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from nanomem.audience import PERSONAL_PATHS, PROMPT_PATHS, room_folder
from nanomem.locks import FileLock
from nanomem.text.plural import plural
from nanomem.tools.context import OUTSIDE, ToolContext
from nanomem.tools.pdf import PdfUnreadable, pdf_text
from nanomem.tools.registry import Tool, ToolError, read_only_tool
from nanomem.tools.safe_open import (
    is_hard_link,
    open_checked,
    open_folder_checked,
    read_checked,
    write_checked,
)

if TYPE_CHECKING:
    from nanomem.config import DocumentSettings

MAX_READ_BYTES = 2_000_000
MAX_PDF_BYTES = 20 * 2**20  # what a chat can send; its text is cut at MAX_READ_BYTES
# The largest file `send_file` hands to a chat: what Telegram takes from a bot (50 MB).
MAX_SEND_BYTES = 50 * 1000 * 1000
LOCK_WAIT_S = 60.0  # Dream holds the memory lock only to apply and commit


class FileTools:
    """read_file, write_file, edit_file, list_dir and send_file over one workspace."""

    def __init__(
        self,
        workspace: Path,
        *,
        restrict: bool = True,
        read_only: tuple[str, ...] = (),
        memory_files: tuple[str, ...] = (),
        memory_lock: FileLock | None = None,
        documents: DocumentSettings | None = None,
    ) -> None:
        if documents is None:
            from nanomem.config import DocumentSettings

            documents = DocumentSettings()
        self.documents = documents  # the limits a PDF is read within
        self.root = workspace.resolve()
        self.restrict = restrict
        # Files (and folders) the agent may read but must never write: the history archive,
        # cursors, and the prompt templates, which would otherwise let it rewrite its rules.
        self.read_only = {(self.root / rel).resolve() for rel in read_only}
        self.personal = {(self.root / rel).resolve() for rel in PERSONAL_PATHS}
        self.prompt_files = {(self.root / rel).resolve() for rel in PROMPT_PATHS}
        # Dream applies its edits to these under the memory lock: a write of ours in between
        # would be overwritten, so ours take the lock too (briefly, never for a whole run).
        self.memory_files = {(self.root / rel).resolve() for rel in memory_files}
        self.memory_lock = memory_lock

    def tools(self) -> list[Tool]:
        return [
            Tool.from_function(self.read_file),
            Tool.from_function(self.write_file),
            Tool.from_function(self.edit_file),
            Tool.from_function(self.list_dir),
            # Offered to every turn, so the tools (a prompt-cache prefix the Consolidator
            # shares) are the same everywhere; without a chat to receive it, it says so.
            Tool.from_function(self.send_file),
        ]

    def _base(self, context: ToolContext) -> Path:
        """The folder the tools work in for this call: the shared room's own when a group's
        turn runs (made on first use), else the workspace."""
        session = context.session
        room = context.shared_room
        folder = room_folder(self.root, session, room) if session is not None else None
        if folder is None:
            return self.root
        folder.mkdir(parents=True, exist_ok=True)
        return folder.resolve()

    def resolve(self, path: str, context: ToolContext = OUTSIDE) -> Path:
        return self._resolve(path, self._base(context))

    def _resolve(self, path: str, root: Path) -> Path:
        if not path.strip():
            raise ToolError("path is empty")
        in_room = root != self.root
        where = "this group's folder" if in_room else "the workspace"
        if not self.restrict and not in_room:
            candidate = Path(path).expanduser()
            return (candidate if candidate.is_absolute() else root / candidate).resolve()
        pure = PurePosixPath(path.replace("\\", "/"))
        if path.startswith("~") or pure.is_absolute():
            raise ToolError(f"{path!r} is outside {where}; use a path relative to it")
        if ".." in pure.parts:
            raise ToolError(f"{path!r} uses '..'; paths must stay inside {where}")
        resolved = (root / pure).resolve()
        if not resolved.is_relative_to(root):
            raise ToolError(f"{path!r} leads outside {where} (through a link)")
        return resolved

    def _display(self, path: Path, root: Path) -> str:
        return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)

    def _guarded(self, target: Path) -> AbstractContextManager[None]:
        if self.memory_lock is not None and target in self.memory_files:
            return self.memory_lock.hold_sync(wait_s=LOCK_WAIT_S)
        return nullcontext()

    def _private(self, target: Path, path: str, context: ToolContext) -> None:
        """In a shared room (a group chat), the owner's personal memory cannot be opened."""
        if context.personal:
            return
        if any(target == kept or target.is_relative_to(kept) for kept in self.personal):
            raise ToolError(f"{path!r} is the owner's personal memory; not available in a group")

    @read_only_tool
    async def read_file(
        self,
        context: ToolContext,
        path: Annotated[str, Field(description="File path relative to the workspace")],
        start_line: Annotated[int, Field(ge=1, description="First line to return")] = 1,
        max_lines: Annotated[int | None, Field(ge=1, description="How many lines")] = None,
    ) -> str:
        """Read a text file or a PDF's text from the workspace, optionally a range of lines."""
        found = await asyncio.to_thread(self._read, context, path)
        if isinstance(found, bytes):  # parsed in a child process: it can be stopped
            return _lines(await self._pdf(found, path), start_line, max_lines, cut=False)
        text, cut = found
        return _lines(text, start_line, max_lines, cut=cut)

    def _read(self, context: ToolContext, path: str) -> tuple[str, bool] | bytes:
        """A text file's text and whether it was cut, or a PDF's bytes."""
        root = self._base(context)
        target = self._resolve(path, root)
        self._private(target, path, context)
        if target.suffix.lower() == ".pdf":
            data = read_checked(root, target, path, MAX_PDF_BYTES + 1)
            if len(data) > MAX_PDF_BYTES:
                raise ToolError(f"{path!r} is a PDF over {MAX_PDF_BYTES // 2**20} MB; not read")
            return data
        data = read_checked(root, target, path, MAX_READ_BYTES + 1)
        if b"\0" in data[:8192]:
            raise ToolError(f"{path!r} is a binary file")
        text = data[:MAX_READ_BYTES].decode("utf-8", errors="replace")
        return text, len(data) > MAX_READ_BYTES

    async def _pdf(self, data: bytes, path: str) -> str:
        try:
            pdf = await pdf_text(data, MAX_READ_BYTES, self.documents)
        except PdfUnreadable as exc:
            raise ToolError(f"{path!r} could not be read as a PDF: {exc}") from None
        if pdf.note and not pdf.text:
            return f"({plural(pdf.pages, 'page')}: {pdf.note}; no text in the pages read)"
        if not pdf.text:
            return f"({plural(pdf.pages, 'page')}, no text layer: scanned images?)"
        return f"{pdf.text}\n[{pdf.note}]" if pdf.note else pdf.text

    def write_file(
        self,
        context: ToolContext,
        path: Annotated[str, Field(description="File path relative to the workspace")],
        content: Annotated[str, Field(description="The complete new content")],
    ) -> str:
        """Create or overwrite a text file in the workspace (parent folders are created)."""
        root = self._base(context)
        target = self._writable(path, root, context)
        with self._guarded(target):
            write_checked(root, target, content, path)
        return f"Wrote {plural(len(content), 'character')} to {self._display(target, root)}"

    def edit_file(
        self,
        context: ToolContext,
        path: Annotated[str, Field(description="File path relative to the workspace")],
        old_text: Annotated[str, Field(description="Exact text to replace; must occur once")],
        new_text: Annotated[str, Field(description="Replacement text")],
    ) -> str:
        """Replace one exact occurrence of old_text with new_text in a workspace file."""
        root = self._base(context)
        target = self._writable(path, root, context)
        if not target.is_file():
            raise ToolError(f"no file at {path!r}")
        if not old_text:
            raise ToolError("old_text is empty; use write_file to create a file")
        with self._guarded(target):
            data = read_checked(root, target, path, MAX_READ_BYTES + 1)
            if len(data) > MAX_READ_BYTES:
                raise ToolError(f"{path!r} is larger than 2 MB; it is not edited")
            content = data.decode("utf-8")
            return self._replace(target, path, content, old_text, new_text, root)

    def _replace(
        self,
        target: Path,
        path: str,
        content: str,
        old_text: str,
        new_text: str,
        root: Path,
    ) -> str:
        count = content.count(old_text)
        if count == 0:
            raise ToolError(f"old_text was not found in {path!r}; read the file and copy exactly")
        if count > 1:
            raise ToolError(
                f"old_text occurs {count} times in {path!r}; include more surrounding text"
            )
        write_checked(root, target, content.replace(old_text, new_text, 1), path)
        return f"Edited {self._display(target, root)}"

    @read_only_tool
    def list_dir(
        self,
        context: ToolContext,
        path: Annotated[str, Field(description="Folder relative to the workspace")] = ".",
    ) -> str:
        """List a workspace folder: sub-folders end with '/', files show their size."""
        root = self._base(context)
        target = self._resolve(path, root)
        self._private(target, path, context)
        rows = []
        fd = open_folder_checked(root, target, path)
        try:
            with os.scandir(fd) as found:
                entries = sorted(found, key=lambda e: (not e.is_dir(), e.name.lower()))
            for entry in entries:
                if entry.name == ".git":
                    continue
                if entry.is_dir():
                    rows.append(f"{entry.name}/")
                    continue
                info = entry.stat(follow_symlinks=False)
                if is_hard_link(info):  # shown, so the model knows why it cannot open it
                    rows.append(f"{entry.name}  (a hard link: refused)")
                elif entry.is_file():
                    rows.append(f"{entry.name}  ({entry.stat().st_size} bytes)")
                else:
                    rows.append(f"{entry.name}  (not a regular file)")
        finally:
            os.close(fd)
        return "\n".join(rows) if rows else "(empty folder)"

    async def send_file(
        self,
        context: ToolContext,
        path: Annotated[str, Field(description="File path relative to the workspace")],
        caption: Annotated[str, Field(description="A short line shown with the file")] = "",
    ) -> str:
        """Send a workspace file (a report, a CSV, an image) to the person in this chat."""
        if context.outlet is None:
            raise ToolError("no chat is there to receive a file now; name its path instead")
        target, size = await asyncio.to_thread(self._sendable, path, context)
        # Channels read it from the workspace (a group's file from its own folder).
        where = str(target.relative_to(self.root)) if target.is_relative_to(self.root) else target
        await context.outlet(str(where), caption.strip())
        return f"sent {target.name} ({_size(size)}) to the chat"

    def _sendable(self, path: str, context: ToolContext) -> tuple[Path, int]:
        """The checked file and its size; ToolError for what must not or cannot go."""
        root = self._base(context)
        target = self._resolve(path, root)
        self._private(target, path, context)
        fd = open_checked(root, target, path)  # no link, no hard link, a regular file
        try:
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        if size == 0:
            raise ToolError(f"{path!r} is empty; there is nothing to send")
        if size > MAX_SEND_BYTES:
            raise ToolError(
                f"{path!r} is {_size(size)}; a chat takes files up to {_size(MAX_SEND_BYTES)}"
            )
        return target, size

    def _writable(self, path: str, root: Path, context: ToolContext) -> Path:
        target = self._resolve(path, root)
        self._private(target, path, context)
        if any(target == kept or target.is_relative_to(kept) for kept in self.read_only):
            raise ToolError(f"{path!r} is maintained by nanomem itself and cannot be changed")
        if root != self.root and any(
            target == kept or target.is_relative_to(kept) for kept in self.prompt_files
        ):  # unreachable from the room's folder; refused should a link ever lead there
            raise ToolError(f"{path!r} feeds the system prompt; a group cannot change it")
        if target.is_dir():
            raise ToolError(f"{path!r} is a folder")
        return target


def _size(size: int) -> str:
    """812 bytes, 2.1 kB, 4.0 MB: as a person reads a size (SI units, as Telegram counts)."""
    if size < 1000:
        return plural(size, "byte")
    value = size / 1000
    for unit in ("kB", "MB"):
        if value < 1000:
            return f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


def _lines(text: str, start_line: int, max_lines: int | None, *, cut: bool) -> str:
    lines = text.splitlines(keepends=True)
    end = len(lines) if max_lines is None else start_line - 1 + max_lines
    selected = "".join(lines[start_line - 1 : end])
    if cut:
        selected += "\n[file is larger than 2 MB; only the start was read]"
    return selected if selected else "(empty file)"
