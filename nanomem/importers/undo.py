"""Undoing an import with its memory version (`nanomem memory restore ID`, /dream-restore ID):
the skill folders and schedules it brought, named in the version's trailers, go too. A skill
changed since the import is kept (the person's edit), and said. History entries stay: the
archive is append-only and Dream may have read them; they remain marked as imported."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported on use: this module is loaded with the app
    from pathlib import Path

    from nanomem.config import ScheduleSettings
    from nanomem.home import Home
    from nanomem.memory import Version

SLACK_S = 5  # a file written by the import itself may be a little newer than its version


def trailers(message: str) -> dict[str, str]:
    """The `Key: value` lines of a message's last paragraph."""
    found: dict[str, str] = {}
    for line in message.strip().split("\n\n")[-1].splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and " " not in key.strip():
            found[key.strip()] = value.strip()
    return found


def _removed_files(workspace: Path, listed: str, since: float) -> list[str]:
    """The long texts an import kept under workspace/imported/, unless changed since."""
    import json

    try:
        names = json.loads(listed)
    except ValueError:
        return []
    removed = []
    for rel in names if isinstance(names, list) else []:
        parts = PurePosixPath(str(rel)).parts
        if len(parts) < 2 or parts[0] != "imported" or ".." in parts:
            continue
        path = workspace.joinpath(*parts)
        if any(p.is_symlink() for p in [path, *path.parents][: len(parts)]):
            continue
        if path.is_file() and path.lstat().st_mtime <= since:
            with contextlib.suppress(OSError):  # what was not removed is not named as removed
                path.unlink()
                removed.append(str(rel))
            for folder in path.parents[: len(parts) - 1]:
                with contextlib.suppress(OSError):  # not empty: the person's files stay
                    folder.rmdir()
    return removed


def undo_import(
    home: Home, workspace: Path, limits: ScheduleSettings, undone: Version
) -> list[str]:
    marks = trailers(undone.message)
    if "Imported-from" not in marks:
        return []
    from nanomem.importers.found import SAFE_NAME

    lines = []
    removed, kept = [], []
    since = undone.time.timestamp() + SLACK_S
    names = marks.get("Imported-skills", "").split()
    if names and (workspace / "skills").is_symlink():  # the shell may have made it one
        lines.append("The skills folder is a link now: the imported skills were not removed.")
        names = []
    for name in names:
        folder = workspace / "skills" / name
        if not SAFE_NAME.fullmatch(name) or folder.is_symlink() or not folder.is_dir():
            continue
        try:
            if any(p.lstat().st_mtime > since for p in folder.rglob("*")):
                kept.append(name)
                continue
            shutil.rmtree(folder)  # a link inside is removed, never followed
        except OSError as exc:  # the memory files are restored already: say, do not fail
            lines.append(f"Could not remove the skill {name}: {exc.strerror or exc}.")
            continue
        removed.append(name)
    if removed:
        lines.append(f"Removed the skills it imported: {', '.join(removed)}.")
    if kept:
        lines.append(f"Kept the imported skills changed since: {', '.join(kept)}.")
    if files := _removed_files(workspace, marks.get("Imported-files", "[]"), since):
        lines.append(f"Removed the files it kept in the workspace: {', '.join(files)}.")
    if ids := marks.get("Imported-schedules", "").split():
        from nanomem.features.schedules import ScheduleError, ScheduleStore

        store = ScheduleStore.of(home, limits)
        try:
            gone = [i for i in ids if store.remove(i) is not None]
        except ScheduleError as exc:  # schedules.json unreadable: left as it is
            lines.append(f"Its schedules were not removed: {exc}.")
        else:
            if gone:
                lines.append(f"Removed the {len(gone)} schedules it imported.")
    lines.append(
        "Its history entries stay in memory/history.jsonl, marked as imported "
        "(restoring this restore brings back the memory files, not the skills or schedules)."
    )
    return lines
