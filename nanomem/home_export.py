"""`nanomem export`: a snapshot of a home, without its secrets, as an archive (home_archive.py).

What the home's writers keep under a lock (memory and its versions, the history and its
cursors, schedules, the config) is copied while holding those locks, so a running gateway never
tears what is read; sessions are append-only and are copied up to their last whole line. The
copy is then archived at leisure, the manifest first."""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import json
import os
import stat
import tarfile
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from nanomem.config_scrub import ScrubError, scrub_config
from nanomem.durable import truncate_torn_tail
from nanomem.home import Home
from nanomem.home_archive import (
    FILES,
    FOLDERS,
    LEFT_OUT,
    MANIFEST,
    MAX_FILE_BYTES,
    MAX_MEMBERS,
    MAX_TOTAL_BYTES,
    ArchiveError,
    Entry,
    Manifest,
)
from nanomem.locks import LockBusy

# The locks of everything copied first, in the one order every export takes them. Not Dream's:
# a run holds it for minutes; its journal is replaced atomically and written before the memory
# it changes, so any copy of it beside the frozen memory is a state a crash could leave, and
# the next run finishes it.
LOCKS = ("config", "memory", "history", "schedules", "shell-allowlist", "usage")
LOCK_WAIT_S = 30.0
MEMORY_PARTS = ("SOUL.md", "USER.md", "memory")  # of the workspace: under the memory locks
_CHUNK = 1 << 20
MIN_SECRET = 6  # as masking: shorter values are too likely to be ordinary words


@dataclass
class Exported:
    manifest: Manifest
    archive_bytes: int = 0
    left_out: list[str] = field(default_factory=list)  # "path: why", what was not copied
    dropped: list[str] = field(default_factory=list)  # settings taken out that are not secrets
    secret_values: list[str] = field(default_factory=list, repr=False)  # never shown


def export_home(
    home: Home, workspace: Path, out: BinaryIO, *, secrets: list[str], version: str
) -> Exported:
    """Write the archive of `home` to `out`; `secrets`: values no archived byte may hold."""
    with tempfile.TemporaryDirectory(prefix="nanomem-export-") as folder:
        staged = Path(folder)
        done = Exported(Manifest(version, datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), []))
        with _holding(home):
            _copy_config(home, staged, done)
            _copy_tree(home.memory_git, staged / "memory.git", done, skip_locks=True)
            for part in MEMORY_PARTS:
                _copy_any(workspace / part, staged / "workspace" / part, done)
            for name in FILES[1:]:
                _copy_any(home.root / name, staged / name, done)
        _copy_tree(workspace, staged / "workspace", done, skip=MEMORY_PARTS)
        _copy_tree(home.sessions, staged / "sessions", done)
        for session in (staged / "sessions").glob("*.jsonl"):
            truncate_torn_tail(session)  # a line being appended as it was copied
        _list(home, done)
        _check_and_list(staged, done, [*secrets, *done.secret_values])
        counter = _Counting(out)
        _write(staged, done.manifest, counter)
        done.archive_bytes = counter.written
        return done


def _holding(home: Home) -> ExitStack:
    stack = ExitStack()
    try:
        for name in LOCKS:
            stack.enter_context(home.lock(name).hold_sync(LOCK_WAIT_S))
    except LockBusy as busy:
        stack.close()
        raise ArchiveError(
            f"the home is busy ({busy.path.stem} has been held for {LOCK_WAIT_S:g} s); "
            "try again in a moment"
        ) from None
    except BaseException:
        stack.close()
        raise
    return stack


def _copy_config(home: Home, staged: Path, done: Exported) -> None:
    if not home.config.is_file():
        return
    try:
        scrubbed = scrub_config(
            home.config.read_text(encoding="utf-8"), drop=(("agent", "workspace"),)
        )
    except (ScrubError, UnicodeDecodeError) as exc:
        done.left_out.append(f"config.toml: {exc} (set it up again after importing)")
        return
    (staged / "config.toml").write_text(scrubbed.text, encoding="utf-8")
    done.manifest.secrets_removed = scrubbed.removed
    done.dropped = scrubbed.dropped
    done.secret_values = scrubbed.values


def _copy_any(source: Path, target: Path, done: Exported) -> None:
    if source.is_dir() and not source.is_symlink():
        _copy_tree(source, target, done)
    elif source.exists() or source.is_symlink():
        folder = os.open(source.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            _copy_file(folder, source, target, done)
        finally:
            os.close(folder)


def _copy_tree(
    source: Path,
    target: Path,
    done: Exported,
    *,
    skip: tuple[str, ...] = (),
    skip_locks: bool = False,
) -> None:
    """Every regular file below `source`. By folder descriptors (os.fwalk): a folder swapped
    for a link while it is read (the agent's shell may run meanwhile) leads nowhere else."""
    if not source.is_dir():
        return
    for folder, dirs, files, fd in os.fwalk(source, follow_symlinks=False):
        here = Path(folder)
        relative = here.relative_to(source)
        if relative == Path():
            dirs[:] = [d for d in dirs if d not in skip]
            files = [f for f in files if f not in skip]
        for name in dirs:
            if stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                done.left_out.append(f"{here / name}: a link (links are not archived)")
        for name in sorted(files):
            if skip_locks and name.endswith(".lock"):
                continue  # a git lock file: the writer holding it is not done (we hold its lock)
            _copy_file(fd, here / name, target / relative / name, done)


def _copy_file(folder: int, source: Path, target: Path, done: Exported) -> None:
    """A regular file's bytes (`source`'s name in `folder`), never through a link; anything
    else is said and skipped."""
    try:  # O_NONBLOCK: a FIFO's open would wait for a writer
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
        fd = os.open(source.name, flags, dir_fd=folder)
    except OSError as exc:
        link = exc.errno == errno.ELOOP
        done.left_out.append(
            f"{source}: {'a link (links are not archived)' if link else exc.strerror}"
        )
        return
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            done.left_out.append(f"{source}: not a regular file")
            return
        if info.st_size > MAX_FILE_BYTES:
            done.left_out.append(f"{source}: larger than {MAX_FILE_BYTES:,} bytes")
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("xb") as copy:  # as long as it was: a file still growing stops there
            left = info.st_size
            while left and (chunk := fh.read(min(left, _CHUNK))):
                copy.write(chunk)
                left -= len(chunk)
        os.utime(target, (info.st_atime, info.st_mtime))


def _list(home: Home, done: Exported) -> None:
    """What the home holds that stays behind, by name and why."""
    for name in sorted(p.name for p in home.root.iterdir()):
        if name in LEFT_OUT:
            done.left_out.append(f"{name}: {LEFT_OUT[name]}")
        elif name not in (*FILES, *FOLDERS):
            done.left_out.append(f"{name}: not part of a home nanomem knows")


def _check_and_list(staged: Path, done: Exported, secrets: list[str]) -> None:
    """Each staged file's size and sha256 into the manifest; a file that holds a secret's
    value (a key pasted into a note) is left out, and said."""
    needles = sorted({s.encode() for s in secrets if len(s) >= MIN_SECRET}, key=len)
    for path in sorted(p for p in staged.rglob("*") if p.is_file()):
        name = path.relative_to(staged).as_posix()
        size, digest, holds_secret = _read(path, needles)
        if holds_secret:
            path.unlink()
            done.left_out.append(f"{name}: it holds the value of a secret")
            continue
        done.manifest.files.append(Entry(name, size, digest))
    if len(done.manifest.files) > MAX_MEMBERS:
        raise ArchiveError(f"the home holds more than {MAX_MEMBERS:,} files; an archive cannot")
    if done.manifest.total > MAX_TOTAL_BYTES:
        raise ArchiveError(f"the home holds more than {MAX_TOTAL_BYTES:,} bytes; an archive cannot")


def _read(path: Path, needles: list[bytes]) -> tuple[int, str, bool]:
    """(size, sha256, whether a needle occurs), reading in chunks that overlap by the longest
    needle, so one split across two chunks is found."""
    digest, size, tail = hashlib.sha256(), 0, b""
    keep = max((len(n) for n in needles), default=1) - 1
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(chunk)
            size += len(chunk)
            window = tail + chunk
            if any(n in window for n in needles):
                return size, "", True
            tail = window[-keep:] if keep else b""
    return size, digest.hexdigest(), False


def _write(staged: Path, manifest: Manifest, out: _Counting) -> None:
    body = json.dumps(manifest.to_json(), indent=1).encode()
    # filename "": the gzip header names no file of ours (the staging folder's name, say).
    zipped = gzip.GzipFile(filename="", mode="wb", fileobj=out)
    with zipped, tarfile.open(fileobj=zipped, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        now = int(datetime.now(UTC).timestamp())
        tar.addfile(_info(MANIFEST, len(body), now), io.BytesIO(body))
        for entry in manifest.files:
            path = staged / entry.path
            with path.open("rb") as fh:
                tar.addfile(_info(entry.path, entry.size, int(path.stat().st_mtime)), fh)


def _info(name: str, size: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, mtime, 0o600
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


class _Counting:
    """The archive's stream, counting what is written."""

    def __init__(self, out: BinaryIO) -> None:
        self._out, self.written = out, 0

    def write(self, data: bytes) -> int:
        self._out.write(data)
        self.written += len(data)
        return len(data)

    def flush(self) -> None:
        self._out.flush()


def archive_name(now: datetime | None = None) -> str:
    """The default file name: nanomem-home-YYYYMMDD-HHMMSS.tar.gz (local time)."""
    return f"nanomem-home-{(now or datetime.now()).strftime('%Y%m%d-%H%M%S')}.tar.gz"
