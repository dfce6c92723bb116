"""`nanomem import-home`: an archive from `nanomem export` (home_archive.py) restored into a home.

Nothing in the archive is trusted. It is read twice, streaming: once to check it whole (the
manifest, every member's type, path and size, every checksum) without writing a byte, then
again into a new folder beside the home, checked the same way as it is written. Only then is
the old home, if there is one, renamed aside and the new one renamed into its place. The gzip
stream is inflated within a budget that each member's declared size tightens, so a bomb stops
within a header's room of what the manifest announced."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from nanomem.durable import fsync_dir
from nanomem.home import Home
from nanomem.home_archive import (
    MANIFEST,
    MAX_MANIFEST_BYTES,
    ArchiveError,
    Entry,
    Manifest,
    check_path,
    parse_manifest,
)
from nanomem.locks import LockBusy
from nanomem.text import untrusted_json

CHUNK = 1 << 16
# What tarfile may read past a member's data before the next one's header is ours to judge:
# padding, a PAX header, its read-ahead (20 blocks), the end-of-archive blocks.
HEADER_ROOM = 256 << 10
MEMBER_ROOM = 8 << 10  # a member's own headers and padding, long names in PAX included
_GZIP_MAGIC = b"\x1f\x8b"
_NOWHERE = "/nonexistent-nanomem-import"  # tarfile's data filter judges paths against a folder


class HomeInUse(Exception):
    """The target home cannot be replaced now (a gateway runs on it, or it holds memory)."""


@dataclass(frozen=True)
class Imported:
    manifest: Manifest
    moved_aside: Path | None  # where the home that was there went


def read_archive(archive: Path) -> Manifest:
    """The archive checked whole, nothing written: its manifest, or ArchiveError."""
    with _opened(archive) as raw:
        return _walk(raw, None)


def import_home(archive: Path, home: Home) -> Imported:
    """Restore `archive` (already checked by read_archive) as `home`; the home that was there,
    if any, is renamed aside. The caller has decided that may happen."""
    parent = home.root.parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{home.root.name}.import-", dir=parent))
    try:
        with _opened(archive) as raw:
            manifest = _walk(raw, staging)  # checked again: the file may have changed since
        with _quiet(home):
            aside = _swap(home, staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Imported(manifest, aside)


@contextmanager
def _opened(archive: Path) -> Iterator[BinaryIO]:
    try:
        fh = archive.open("rb")
    except OSError as exc:
        raise ArchiveError(f"cannot read {archive}: {exc.strerror}") from None
    with fh:
        if fh.read(2) != _GZIP_MAGIC:
            raise ArchiveError(f"{archive} is not a gzip file (nanomem export writes a .tar.gz)")
        fh.seek(0)
        yield fh


def _walk(raw: BinaryIO, into: Path | None) -> Manifest:
    """Every member checked (and written below `into`, when given); the manifest."""
    stream = _Inflating(raw)
    try:
        with tarfile.open(fileobj=io.BufferedReader(stream, CHUNK), mode="r|") as tar:
            manifest = _manifest(tar, stream)
            expected = {entry.path: entry for entry in manifest.files}
            seen: set[str] = set()
            # All of it: the files, a few blocks of headers each, the end; not HEADER_ROOM per
            # member, which 100,000 members of long PAX headers would make gigabytes.
            ceiling = stream.consumed + manifest.total + len(expected) * MEMBER_ROOM + HEADER_ROOM
            while True:
                tar.members.clear()  # type: ignore[attr-defined]  # a stream is read once: no list
                stream.limit = min(ceiling, stream.consumed + HEADER_ROOM)
                member = tar.next()
                if member is None:
                    break
                entry = _judged(member, expected, seen)
                stream.limit = min(ceiling, stream.consumed + member.size + HEADER_ROOM)
                _take(tar, member, entry, into)
    except (tarfile.TarError, EOFError) as exc:
        raise ArchiveError(f"not a readable tar archive ({exc or 'cut short'})") from None
    if missing := sorted(set(expected) - seen):
        raise ArchiveError(f"{missing[0]} is in the manifest but not in the archive")
    if into is not None:
        for folder, _, _ in os.walk(into):
            fsync_dir(Path(folder))
    return manifest


def _manifest(tar: tarfile.TarFile, stream: _Inflating) -> Manifest:
    first = tar.next()
    if first is None or first.name != MANIFEST or not first.isreg():
        raise ArchiveError(f"not a nanomem home archive: it does not begin with {MANIFEST}")
    if first.size > MAX_MANIFEST_BYTES:
        raise ArchiveError(f"{MANIFEST} is larger than {MAX_MANIFEST_BYTES:,} bytes")
    stream.limit = stream.consumed + first.size + HEADER_ROOM
    body = tar.extractfile(first)
    assert body is not None  # a regular file's
    try:
        return parse_manifest(untrusted_json.loads(body.read()))
    except (ValueError, UnicodeDecodeError):
        raise ArchiveError(f"{MANIFEST} is not valid JSON") from None


def _judged(member: tarfile.TarInfo, expected: dict[str, Entry], seen: set[str]) -> Entry:
    """The manifest's entry for `member`, if the member may be restored at all."""
    shown = member.name[:80].encode("unicode_escape").decode("ascii")
    try:
        tarfile.data_filter(member, _NOWHERE)
    except tarfile.FilterError as exc:
        raise ArchiveError(f"refused member {shown!r}: {exc}") from None
    if not member.isreg() or member.issparse():
        raise ArchiveError(f"refused member {shown!r}: {_kind(member)}; only regular files belong")
    if member.mode & 0o7000:
        raise ArchiveError(f"refused member {shown!r}: setuid, setgid or sticky bits")
    name = check_path(member.name)
    entry = expected.get(name)
    if entry is None:
        raise ArchiveError(f"refused member {shown!r}: not in the manifest")
    if name in seen:
        raise ArchiveError(f"refused member {shown!r}: it comes twice")
    if member.size != entry.size:
        said, held = _bytes(entry.size), _bytes(member.size)
        raise ArchiveError(f"{name}: the manifest says {said}, the archive holds {held}")
    seen.add(name)
    return entry


def _bytes(n: int) -> str:
    return f"{n:,} byte{'' if n == 1 else 's'}"


def _kind(member: tarfile.TarInfo) -> str:
    if member.issparse():
        return "a sparse file"
    if member.issym():
        return "a symbolic link"
    if member.islnk():
        return "a hard link"
    if member.isdir():
        return "a folder"
    if member.ischr() or member.isblk():
        return "a device"
    if member.isfifo():
        return "a FIFO"
    return "not a regular file"


def _take(tar: tarfile.TarFile, member: tarfile.TarInfo, entry: Entry, into: Path | None) -> None:
    """Read the member's data, hashing it; written below `into` when given."""
    body = tar.extractfile(member)
    assert body is not None
    digest = hashlib.sha256()
    with ExitStack() as stack:
        out = None
        if into is not None:
            target = into / entry.path
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            out = stack.enter_context(os.fdopen(os.open(target, flags, 0o600), "wb"))
        for chunk in iter(lambda: body.read(CHUNK), b""):
            digest.update(chunk)
            if out is not None:
                out.write(chunk)
        if out is not None:
            out.flush()
            os.fsync(out.fileno())
    if digest.hexdigest() != entry.sha256:
        raise ArchiveError(f"{entry.path}: its checksum does not match the manifest")


class _Inflating(io.RawIOBase):
    """The archive's gzip stream inflated within `limit` bytes in all, which the reader raises
    member by member: inflating never runs ahead of what the manifest announced."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip only
        self._pending = b""
        self.consumed = 0
        self.limit = MAX_MANIFEST_BYTES + HEADER_ROOM

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            if self._zlib.eof:
                if self._zlib.unused_data or self._raw.read(1):
                    raise ArchiveError("bytes after the end of the archive's gzip data")
                return 0
            room = self.limit - self.consumed
            if room <= 0:
                raise ArchiveError(
                    "the archive inflates past what its manifest announces (a gzip bomb?)"
                )
            data = self._zlib.unconsumed_tail or self._raw.read(CHUNK)
            if not data:
                raise ArchiveError("the archive is cut short (its gzip data end early)")
            try:
                self._pending = self._zlib.decompress(data, min(room, CHUNK))
            except zlib.error:
                raise ArchiveError("the archive's gzip data are damaged") from None
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        self.consumed += n
        return n


@contextmanager
def _quiet(home: Home) -> Iterator[None]:
    """No gateway may start, and no memory or history write be under way, while the home is
    swapped (locks of the old home: they move aside with it)."""
    if not home.root.is_dir():
        yield
        return
    with ExitStack() as stack:
        try:
            stack.enter_context(home.lock("gateway").hold_sync(0))
        except LockBusy:
            raise HomeInUse(f"a gateway runs on {home.root}; stop it first") from None
        for name in ("memory", "history"):
            try:
                stack.enter_context(home.lock(name).hold_sync(30.0))
            except LockBusy:
                raise HomeInUse(
                    f"{home.root} is busy ({name} is being written); try again"
                ) from None
        yield


def _swap(home: Home, staging: Path) -> Path | None:
    root = home.root
    aside = None
    if root.is_dir() and not any(root.iterdir()):
        root.rmdir()
    elif root.exists() or root.is_symlink():
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        aside = root.with_name(f"{root.name}.before-import-{stamp}")
        n = 1
        while aside.exists():
            n += 1
            aside = root.with_name(f"{root.name}.before-import-{stamp}-{n}")
        root.rename(aside)
    try:
        staging.rename(root)
    except BaseException:
        if aside is not None:
            aside.rename(root)
        raise
    root.chmod(0o700)
    fsync_dir(root.parent)
    return aside


def holds_memory(home: Home, workspace: Path, template: Path) -> list[str]:
    """What in the home is memory a person would lose: history, sessions, a version of memory
    after the first, or a memory file that is no longer the one onboarding wrote. Empty for a
    new (or just onboarded) home."""
    from nanomem.memory import TRACKED, GitStore

    found = []
    history = workspace / "memory" / "history.jsonl"
    if history.is_file() and history.stat().st_size:
        found.append(str(history))
    if home.sessions.is_dir() and any(p.stat().st_size for p in home.sessions.glob("*.jsonl")):
        found.append(str(home.sessions))
    try:
        if GitStore(home.memory_git, workspace).has_changes():
            found.append(str(home.memory_git))
    except Exception:  # whatever is wrong with it, it may hold versions: count it as memory
        found.append(f"{home.memory_git} (unreadable)")
    for name in TRACKED:
        mine, onboarded = workspace / name, template / name
        if mine.is_file() and (
            not onboarded.is_file() or mine.read_bytes() != onboarded.read_bytes()
        ):
            found.append(str(mine))
    return found
