"""Opening a file the tools checked, without following a link swapped in since the check.

A path is checked once it is resolved; between that check and the open, a folder or the file
itself may be replaced by a symbolic link (a race), and a hard link is a second name for a
file elsewhere that no path check can see (a link to USER.md inside a group's folder is just a
file there). So the path is walked again from the root one folder at a time without following
links, and the opened descriptor itself is asked what it is.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from nanomem.durable import DIR_FLAGS, open_folder_below, replace_in
from nanomem.text.utf8 import encode
from nanomem.tools.registry import ToolError


def open_checked(root: Path, target: Path, shown: str) -> int:
    """A read-only descriptor of the regular, singly linked file at `target` (already resolved);
    ToolError when a link or anything but such a file is there now."""
    # O_NONBLOCK: a FIFO planted under the name must not hang the tool on open.
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = _open_below(root, target, flags)
    except FileNotFoundError:
        raise ToolError(f"no file at {shown!r}") from None
    except OSError as exc:  # ELOOP, ENOTDIR: a link appeared on the way
        raise ToolError(f"{shown!r} changed while it was opened (a link?); refused") from exc
    try:
        refuse_unless_single(os.fstat(fd), shown)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_checked(root: Path, target: Path, shown: str, limit: int) -> bytes:
    """Up to `limit` bytes of the file at `target`, opened with `open_checked`."""
    fd = open_checked(root, target, shown)
    with os.fdopen(fd, "rb") as fh:
        return fh.read(limit)


def read_text_below(root: Path, relative: str, limit: int = 1 << 20) -> str | None:
    """The text of root/relative (up to `limit` bytes), opened as `read_checked` opens it;
    None when no file is there. ToolError when a link, a hard link or anything but a regular
    file is: nanomem's own reads of the workspace (the prompt's files, skills, templates) must
    not be sent by a link a shell command planted to what the sandbox hid (config.toml)."""
    base = root.resolve()
    try:
        data = read_checked(base, base / relative, relative, limit)
    except ToolError:
        if not os.path.lexists(base / relative):
            return None
        raise
    return data.decode("utf-8", errors="replace")


def refuse_unless_single(info: os.stat_result, shown: str) -> None:
    """A file with more than one name is a hard link: it may be any file of the same disk."""
    if stat.S_ISDIR(info.st_mode):
        raise ToolError(f"{shown!r} is a folder")
    if not stat.S_ISREG(info.st_mode):
        raise ToolError(f"{shown!r} is not a regular file")
    if info.st_nlink > 1:
        raise ToolError(
            f"{shown!r} is a hard link (a second name of another file); file tools refuse those"
        )


def is_hard_link(info: os.stat_result) -> bool:
    return stat.S_ISREG(info.st_mode) and info.st_nlink > 1


def _open_below(root: Path, target: Path, flags: int) -> int:
    if not target.is_relative_to(root):  # tools.restrict_to_workspace = false: no root to walk
        return os.open(target, flags)
    parts = target.relative_to(root).parts
    if not parts:
        return os.open(root, flags)
    folder = open_folder_below(root, Path(*parts[:-1]), make=False)
    try:
        return os.open(parts[-1], flags, dir_fd=folder)
    finally:
        os.close(folder)


def open_folder_checked(root: Path, target: Path, shown: str) -> int:
    """A descriptor of the folder at `target`, reached without following a link."""
    try:
        return _open_below(root, target, DIR_FLAGS)
    except FileNotFoundError:
        raise ToolError(f"no folder at {shown!r}") from None
    except NotADirectoryError:
        raise ToolError(f"no folder at {shown!r}") from None
    except OSError as exc:
        raise ToolError(f"{shown!r} changed while it was opened (a link?); refused") from exc


def write_checked(root: Path, target: Path, text: str, shown: str) -> None:
    """atomic_write_text's crash-safe replace (temporary file, fsync, rename, fsync of the
    folder), done inside the target's folder as reached without following links: a folder
    swapped for a link after the check cannot send the write elsewhere."""
    if not target.is_relative_to(root):  # tools.restrict_to_workspace = false: no root to walk
        folder = _make_folders(Path(target.anchor), target.parent.relative_to(target.anchor))
    else:
        folder = _make_folders(root, target.parent.relative_to(root), shown)
    try:
        _replace_in(folder, target.name, encode(text), shown)
    finally:
        os.close(folder)


def _make_folders(root: Path, relative: Path, shown: str = "") -> int:
    """A descriptor of root/relative, its missing folders made, no link followed on the way."""
    try:
        return open_folder_below(root, relative)
    except OSError as exc:
        raise ToolError(f"{shown!r} changed while it was written (a link?); refused") from exc


def _replace_in(folder: int, name: str, data: bytes, shown: str) -> None:
    try:
        old: os.stat_result | None = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        old = None
    if old is not None and not stat.S_ISLNK(old.st_mode):
        refuse_unless_single(old, shown)
    keep = stat.S_IMODE(old.st_mode) if old is not None and stat.S_ISREG(old.st_mode) else None
    replace_in(folder, name, data, keep)
