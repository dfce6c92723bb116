"""Crash-safe file writes: append with fsync, or write a temp file and rename it over."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from nanomem.text.utf8 import encode

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def append_lines(
    path: Path, lines: Iterable[str], *, within: Path | None = None, sync: bool = True
) -> None:
    """Append whole lines in one write and fsync, so a crash leaves at most one torn last line.
    Always valid UTF-8: a lone surrogate is replaced, never a reason to lose the write.
    `within`: see `_opened`. `sync=False`: one write, no fsync (it survives our own crash, not
    a power cut), for records whose loss costs nothing but a count."""
    data = encode("".join(line if line.endswith("\n") else line + "\n" for line in lines))
    if not data:
        return
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
    with _opened(path, flags, within) as fd, os.fdopen(fd, "ab", closefd=False) as fh:
        fh.write(data)
        fh.flush()
        if sync:
            os.fsync(fh.fileno())


@contextlib.contextmanager
def _opened(path: Path, flags: int, within: Path | None) -> Iterator[int]:
    """A descriptor of `path`. With `within` (the workspace, which a shell command may write),
    no link below it is followed, the file's own name included: a link a command planted
    (memory/ -> ~/.bashrc.d) cannot send our write out of it (OSError instead)."""
    if within is None:
        fd = os.open(path, flags, 0o666)
    else:
        folder = open_folder_below(within.resolve(), path.parent.relative_to(within))
        try:
            fd = os.open(path.name, flags | os.O_NOFOLLOW, 0o666, dir_fd=folder)
        finally:
            os.close(folder)
    try:
        yield fd
    finally:
        os.close(fd)


def atomic_write_text(
    path: Path,
    text: str,
    *,
    mode: int | None = None,
    within: Path | None = None,
    check: Callable[[Path], object] | None = None,
) -> None:
    """Replace `path` with `text` so readers see the old or the new file, never a mix.
    `within`: no link below it followed (see `_opened`). `check`: called with the written
    temporary file before it replaces `path`; what it raises leaves `path` as it was."""
    if within is not None:
        if check is not None:
            raise TypeError("a checked write below a folder is not supported")
        write_below(within.resolve(), path.relative_to(within), encode(text), mode=mode)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(encode(text))
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            tmp.chmod(mode)
        elif path.exists():
            tmp.chmod(path.stat().st_mode & 0o7777)
        if check is not None:
            check(tmp)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    """Make a rename durable: the directory entry itself must reach the disk."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def truncate_torn_tail(path: Path, *, within: Path | None = None) -> bytes:
    """Cut a final line that lacks its newline (a write cut short); return the removed bytes.
    `within`: no link below it followed (see `_opened`)."""
    with (
        _opened(path, os.O_RDWR | os.O_CLOEXEC, within) as fd,
        os.fdopen(fd, "rb+", closefd=False) as fh,
    ):
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        if size == 0:
            return b""
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return b""
        # Walk back to the previous newline in blocks; the torn tail is usually short.
        pos = size
        while pos > 0:
            step = min(4096, pos)
            pos -= step
            fh.seek(pos)
            block = fh.read(step)
            idx = block.rfind(b"\n")
            if idx >= 0:
                cut = pos + idx + 1
                break
        else:
            cut = 0
        fh.seek(cut)
        torn = fh.read()
        fh.truncate(cut)
        fh.flush()
        os.fsync(fh.fileno())
        return torn


def write_below(root: Path, relative: Path, data: bytes, *, mode: int | None = None) -> None:
    """Replace root/relative with `data` as atomic_write_text does, its missing folders made,
    following no link below `root` (OSError: ELOOP or ENOTDIR when one is there): a folder
    someone swapped for a link cannot send the write elsewhere. The file keeps its mode (or
    takes `mode`); a new one is private, as mkstemp makes it on atomic_write_text's other path."""
    folder = open_folder_below(root, relative.parent)
    try:
        keep = mode if mode is not None else _mode(folder, relative.name)
        replace_in(folder, relative.name, data, 0o600 if keep is None else keep)
    finally:
        os.close(folder)


def unlink_below(root: Path, relative: Path) -> None:
    """Remove root/relative if it is there, no link below root followed on the way (a planted
    `memory` -> elsewhere must not make us delete a file elsewhere)."""
    try:
        folder = open_folder_below(root, relative.parent, make=False)
    except FileNotFoundError:
        return  # its folder is not there either
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(relative.name, dir_fd=folder)
    finally:
        os.close(folder)


def open_folder_below(root: Path, relative: Path, *, make: bool = True) -> int:
    """A descriptor of root/relative, no link followed on the way; missing folders are made
    (or, with `make=False`, FileNotFoundError)."""
    folder = os.open(root, DIR_FLAGS)
    try:
        for part in relative.parts:
            if make:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=folder)
            inner = os.open(part, DIR_FLAGS, dir_fd=folder)
            os.close(folder)
            folder = inner
    except BaseException:
        os.close(folder)
        raise
    return folder


def _mode(folder: int, name: str) -> int | None:
    """The permission bits of the regular file `name` in the folder; None when there is none."""
    try:
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return stat.S_IMODE(info.st_mode) if stat.S_ISREG(info.st_mode) else None


def replace_in(folder: int, name: str, data: bytes, mode: int | None = None) -> None:
    """Write `data` to a fresh file in the folder (O_EXCL, no link followed), fsync, rename it
    over `name` and fsync the folder; with `mode` (the replaced file's, say) set on it."""
    temporary = f".{name}.{secrets.token_hex(4)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, 0o666, dir_fd=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if mode is not None:
                os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=folder)
        raise
    os.fsync(folder)
