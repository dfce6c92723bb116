"""The home is private: conversations, logs, the inbox and memory versions are readable by the
owner only, also when the home existed before (made by hand, restored from a backup, a shared
volume). New files are private through the process umask; what exists is tightened here."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nanomem.home import Home

WALKED = ".private-v1"  # the home's folders were walked and tightened once


def make_private(home: Home) -> list[Path]:
    """Tighten the home and what holds conversations or secrets; the paths that changed.

    Everything inside is walked once per home (and again whenever the home or one of its
    folders is found loose): what nanomem creates afterwards is private through its umask, so
    a start does not grow with the number of sessions."""
    changed: list[Path] = []
    if not home.root.is_dir():
        return changed
    _tighten(home.root, changed)
    walked = home.root / WALKED
    tops = (
        home.sessions,
        home.logs,
        home.memory_git,
        home.root / "locks",
        home.history_index.parent,
    )
    for top in tops:
        if top.is_dir():
            _tighten(top, changed)
    if changed or not walked.exists():
        for top in filter(Path.is_dir, tops):
            for folder, dirs, files in os.walk(top):
                for name in (*dirs, *files):
                    _tighten(Path(folder) / name, changed)
        walked.touch(mode=0o600)
    for path in (
        home.config,
        home.dream_state,
        home.chat_history,
        home.schedules,
        *_inbox_files(home),
    ):
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
