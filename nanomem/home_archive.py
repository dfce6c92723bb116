"""A home in one file (`nanomem export`, `nanomem import-home`): what goes in, the manifest,
and the bounds every archive is read within.

An archive is a tar.gz whose first member is `manifest.json` (format, versions, and each
file's path, size and sha256), then the files themselves, at the paths they have in a home.
Only regular files: no folders, links or devices. The reader trusts nothing in it: every
path, type and size is checked against these rules before a byte is written."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

FORMAT = "nanomem-home"
VERSION = 1
MANIFEST = "manifest.json"

# What a home keeps that moves with it, by its path in the home (home.py names them all).
FILES = (
    "config.toml",
    "schedules.json",
    "dream.json",
    "dream-journal.json",
    "dream-review.json",
    "shell-allowlist.json",
)
FOLDERS = ("workspace", "sessions", "memory.git")
# Appended one whole line per write: copied without waiting for a lock, to the last whole line.
APPENDED = ("usage.jsonl",)
# What stays behind, and why (printed by `nanomem export`, listed in docs/backup.md).
LEFT_OUT = {
    "logs": "log files",
    "chat_history": "the terminal's input history",
    "index": "the search indexes of the history and the chats (rebuilt when missing)",
    "inbox.sqlite3": "the gateway's inbox (messages in flight on this machine)",
    "inbox.sqlite3-wal": "the gateway's inbox (messages in flight on this machine)",
    "inbox.sqlite3-shm": "the gateway's inbox (messages in flight on this machine)",
    "unread": "what the gateway left for a terminal chat on this machine to show",
    "tasks.json": "background tasks (processes of this machine)",
    "sent-files": "copies behind links in past API answers",
    "mcp-state": "MCP servers' running state",
    "gateway.json": "the running gateway's address",
    "locks": "lock files",
    "matrix": "Matrix's encryption keys and device (secrets: a restored home logs in anew)",
    "web-logins.json": "the web app's one-time login codes and ended logins",
    ".private-v1": "a mark that its permissions were checked (a new home is checked anew)",
}

# Bounds on what an archive may hold; a home far past them is not a home.
MAX_MEMBERS = 100_000
MAX_FILE_BYTES = 1 << 30
MAX_TOTAL_BYTES = 4 << 30
MAX_MANIFEST_BYTES = 16 << 20
MAX_PATH_CHARS = 1_000
MAX_DEPTH = 32
_SHA256 = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[^\x00-\x1f\x7f\\]+")  # no control characters, no backslashes


class ArchiveError(Exception):
    """An archive that is not a nanomem home, or breaks a bound; its message says which."""


@dataclass(frozen=True)
class Entry:
    path: str
    size: int
    sha256: str


@dataclass
class Manifest:
    nanomem: str
    created: str
    files: list[Entry]
    secrets_removed: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(entry.size for entry in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "nanomem": self.nanomem,
            "created": self.created,
            "secrets_removed": self.secrets_removed,
            "files": [{"path": e.path, "size": e.size, "sha256": e.sha256} for e in self.files],
        }


def check_path(path: str) -> str:
    """`path` if it names a file a home may hold from an archive, else ArchiveError."""
    shown = path[:80].encode("unicode_escape").decode("ascii")
    if not path or len(path) > MAX_PATH_CHARS or not _NAME.fullmatch(path):
        raise ArchiveError(f"refused member {shown!r}: not a plain relative path")
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ArchiveError(f"refused member {shown!r}: absolute, or leaves its folder")
    if len(parts) > MAX_DEPTH:
        raise ArchiveError(f"refused member {shown!r}: nested too deep")
    top = parts[0]
    if not (path in (*FILES, *APPENDED) or (top in FOLDERS and len(parts) > 1)):
        raise ArchiveError(f"refused member {shown!r}: not part of a nanomem home")
    return str(PurePosixPath(path))


def parse_manifest(data: Any) -> Manifest:
    """A manifest read from an archive, every field checked."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ArchiveError("not a nanomem home archive (its manifest.json is not one)")
    version = data.get("version")
    if not isinstance(version, int) or version < 1:
        raise ArchiveError("manifest.json has no valid version")
    if version > VERSION:
        raise ArchiveError(f"made by a newer nanomem (archive format {version}); update nanomem")
    files = data.get("files")
    if not isinstance(files, list) or len(files) > MAX_MEMBERS:
        raise ArchiveError(f"manifest.json: 'files' is not a list of at most {MAX_MEMBERS:,}")
    entries: list[Entry] = []
    seen: set[str] = set()
    for item in files:
        if not isinstance(item, dict):
            raise ArchiveError("manifest.json: a file entry is not an object")
        path, size, digest = item.get("path"), item.get("size"), item.get("sha256")
        if not isinstance(path, str):
            raise ArchiveError("manifest.json: a file entry has no path")
        path = check_path(path)
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_FILE_BYTES:
            raise ArchiveError(f"manifest.json: {path}: size missing or over {MAX_FILE_BYTES:,}")
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise ArchiveError(f"manifest.json: {path}: no sha256")
        if path in seen:
            raise ArchiveError(f"manifest.json: {path} is listed twice")
        seen.add(path)
        entries.append(Entry(path, size, digest))
    folders = {str(parent) for path in seen for parent in PurePosixPath(path).parents}
    if clash := sorted(seen & folders):
        raise ArchiveError(f"manifest.json: {clash[0]} is both a file and a folder")
    manifest = Manifest(_text(data, "nanomem"), _text(data, "created"), entries)
    removed = data.get("secrets_removed", [])
    if not isinstance(removed, list) or len(removed) > 1_000:
        raise ArchiveError("manifest.json: 'secrets_removed' is not a list")
    manifest.secrets_removed = [_setting_name(name) for name in removed]
    if manifest.total > MAX_TOTAL_BYTES:
        raise ArchiveError(f"the archive's files come to more than {MAX_TOTAL_BYTES:,} bytes")
    return manifest


def _text(data: dict[str, Any], key: str) -> str:
    value = data.get(key, "")
    if not isinstance(value, str) or len(value) > 100 or not _NAME.fullmatch(value or "x"):
        raise ArchiveError(f"manifest.json: {key!r} is not a short text")
    return value


def _setting_name(name: Any) -> str:
    """A setting's dotted name, as printed to the person: nothing else gets through."""
    if not isinstance(name, str) or not re.fullmatch(r"[\w.\- ]{1,200}", name):
        raise ArchiveError("manifest.json: 'secrets_removed' holds something not a setting")
    return name
