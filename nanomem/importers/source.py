"""Reading another agent's folder, which is untrusted input: every read is bounded (bytes per
file, bytes and files in all, folder entries), no link is followed (a folder or file that is a
link is skipped with its reason, so nothing outside PATH is read), text is decoded with
replacement and stripped of NUL and control characters, and JSON is parsed with a depth bound.
A problem with one item never stops the others: it becomes a `Skipped` with its reason."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nanomem.durable import open_folder_below
from nanomem.text import untrusted_json

MAX_FILE_BYTES = 256 * 1024  # a memory file or skill file; far above any real one
MAX_DATA_BYTES = 8 * 1024 * 1024  # a history or jobs file
MAX_TOTAL_BYTES = 64 * 1024 * 1024  # everything read from one source
MAX_FILES = 2000
MAX_ENTRIES = 5000  # names listed in one folder
MAX_FOLDERS = 2000  # folders listed in all: deep trees of empty folders end here
# Kept: tab and newline. Dropped: NUL, the other C0 controls, DEL and the C1 controls (a
# terminal escape in a memory file would reach `nanomem memory log` and the prompt).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class SourceError(Exception):
    """The source cannot be read at all (PATH missing, not a folder); safe to show."""


@dataclass(frozen=True)
class Skipped:
    source: str  # where in PATH, as shown to the person
    reason: str


def clean(text: str) -> str:
    """Imported text as data: control characters out, line ends as `\\n`."""
    return _CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


@dataclass
class SourceTree:
    """PATH, read only through these methods."""

    root: Path
    skipped: list[Skipped] = field(default_factory=list)
    read_bytes: int = 0
    read_files: int = 0
    listed: int = 0

    @classmethod
    def open(cls, path: Path) -> SourceTree:
        root = path.expanduser().resolve()  # PATH itself may be a link the person named
        if not root.exists():
            raise SourceError(f"{root} does not exist")
        if not root.is_dir():
            raise SourceError(f"{root} is not a folder")
        return cls(root)

    def skip(self, source: str, reason: str) -> None:
        self.skipped.append(Skipped(source, reason))

    def exists(self, rel: str) -> bool:
        return os.path.lexists(self.root / rel)

    def is_dir(self, rel: str) -> bool:
        """A real folder (not a link to one) at `rel`."""
        try:
            return stat.S_ISDIR(os.lstat(self.root / rel).st_mode) and self._folder_ok(rel)
        except OSError:
            return False

    def _folder_ok(self, rel: str) -> bool:
        try:
            os.close(self._open_folder(rel))
        except OSError:
            return False
        return True

    def _folder_of(self, rel: str, parent: str) -> int | None:
        """The descriptor of `rel`'s folder `parent`; None, with a Skipped, when it cannot be."""
        try:
            return self._open_folder(parent)
        except OSError:
            self.skip(rel, "its folder is a link or cannot be opened; not read")
            return None

    def _open_folder(self, rel: str) -> int:
        """A descriptor of root/rel, reached without following any link on the way."""
        if any(part in ("..", "/") for part in Path(rel).parts):
            raise OSError(f"{rel!r} leaves the folder")
        return open_folder_below(self.root, Path(rel), make=False)

    def listdir(self, rel: str = "") -> list[str]:
        """Names in the folder (sorted, at most MAX_ENTRIES); [] when it is not a real folder."""
        if rel and not self.is_dir(rel):
            if self.exists(rel):
                self.skip(rel, "not a folder of its own (a link?); nothing in it was read")
            return []
        self.listed += 1
        if self.listed > MAX_FOLDERS:
            if self.listed == MAX_FOLDERS + 1:
                self.skip(rel, f"past {MAX_FOLDERS} folders; it and the rest were not looked into")
            return []
        folder = self._open_folder(rel)
        try:
            names = sorted(os.listdir(folder))  # noqa: PTH208 - by descriptor: no link followed
        finally:
            os.close(folder)
        if len(names) > MAX_ENTRIES:
            self.skip(rel or ".", f"has {len(names)} entries; only the first {MAX_ENTRIES} read")
        return names[:MAX_ENTRIES]

    def read_bytes_of(self, rel: str, limit: int = MAX_FILE_BYTES) -> bytes | None:
        """The file's bytes; None (and a Skipped saying why) for a link, anything but a plain
        file, a file over `limit`, or past the source's totals. None, silently, when absent."""
        if not self.exists(rel):
            return None
        parent, name = os.path.split(rel)
        if name in ("", ".", ".."):
            self.skip(rel, "not a file name")
            return None
        if self.read_files >= MAX_FILES or self.read_bytes >= MAX_TOTAL_BYTES:
            self.skip(rel, f"past the limits of one import ({MAX_FILES} files, 64 MiB)")
            return None
        if (folder := self._folder_of(rel, parent)) is None:
            return None
        try:
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
            fd = os.open(name, flags, dir_fd=folder)
        except OSError:
            self.skip(rel, "a link (or cannot be opened); links are not followed")
            return None
        finally:
            os.close(folder)
        with os.fdopen(fd, "rb") as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode):
                self.skip(rel, "not a plain file")
                return None
            if info.st_nlink > 1:
                self.skip(rel, "a hard link (a second name of a file elsewhere); not read")
                return None
            data = fh.read(limit + 1)
        if len(data) > limit:
            self.skip(rel, f"over {limit // 1024} KiB; not imported")
            return None
        self.read_files += 1
        self.read_bytes += len(data)
        return data

    def read_text(self, rel: str, limit: int = MAX_FILE_BYTES) -> str | None:
        data = self.read_bytes_of(rel, limit)
        return None if data is None else clean(data.decode("utf-8", errors="replace"))

    def read_json(self, rel: str, limit: int = MAX_DATA_BYTES) -> Any:
        """Parsed JSON, or None (with a Skipped) when it is not JSON."""
        data = self.read_bytes_of(rel, limit)
        if data is None:
            return None
        try:
            return untrusted_json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            self.skip(rel, f"not valid JSON ({str(exc)[:120]}); nothing in it imported")
            return None

    def real_path(self, rel: str) -> Path | None:
        """root/rel when it is a plain file reached without links (for SQLite, which opens by
        path); None, with a Skipped, otherwise."""
        if not self.exists(rel):
            return None
        parent, name = os.path.split(rel)
        if (folder := self._folder_of(rel, parent)) is None:
            return None
        try:
            info = os.stat(name, dir_fd=folder, follow_symlinks=False)
        finally:
            os.close(folder)
        if not stat.S_ISREG(info.st_mode):
            self.skip(rel, "not a plain file (a link?); not read")
            return None
        return self.root / rel
