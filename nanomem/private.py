"""The home is private: conversations, logs, the inbox and memory versions are readable by the
owner only, also when the home existed before (made by hand, restored from a backup, a shared
volume). New files are private through the process umask; what exists is tightened here."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nanomem.onboard import Home

PRIVATE_UMASK = 0o077  # set by the CLI: every file nanomem creates is the owner's alone


def make_private(home: Home) -> list[Path]:
    """Tighten the home and what holds conversations or secrets; the paths that changed."""
    changed: list[Path] = []
    if home.root.is_dir():
        _tighten(home.root, changed)
    for top in (home.sessions, home.logs, home.memory_git, home.root / "locks"):
        if top.is_dir():
            _tighten(top, changed)
            for folder, dirs, files in os.walk(top):
                for name in (*dirs, *files):
                    _tighten(Path(folder) / name, changed)
    for path in (home.config, home.dream_state, home.chat_history, *_inbox_files(home)):
        if path.exists():
            _tighten(path, changed)
    return changed


def _inbox_files(home: Home) -> list[Path]:
    return [home.inbox.with_name(home.inbox.name + suffix) for suffix in ("", "-wal", "-shm")]


def _tighten(path: Path, changed: list[Path]) -> None:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        return  # a link's own mode means nothing; what it points to is not ours to change
    mode = stat.S_IMODE(info.st_mode)
    private = mode & 0o700 if stat.S_ISDIR(info.st_mode) else mode & 0o600
    if stat.S_ISDIR(info.st_mode):
        private |= 0o700
    if private != mode:
        path.chmod(private)
        changed.append(path)
