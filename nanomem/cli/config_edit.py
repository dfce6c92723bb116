"""`nanomem config edit`: the person's editor on a private copy of config.toml; the copy
replaces the file only when the app accepts it, and only if nothing changed the file meanwhile."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nanomem.config_file import Setting
    from nanomem.home import Home


def editor() -> list[str]:
    """$VISUAL, else $EDITOR (with its arguments), else vi or nano."""
    from nanomem.cli.main import CliError

    for name in ("VISUAL", "EDITOR"):
        if words := shlex.split(os.environ.get(name, "")):
            return words
    for fallback in ("vi", "nano"):
        if found := shutil.which(fallback):
            return [found]
    raise CliError("no editor found: set EDITOR (e.g. EDITOR=nano nanomem config edit)")


def edit(home: Home, config: Path, after: Callable[[Home, list[Setting]], None]) -> int:
    from nanomem.cli.main import EXIT_CONFIG, CliError
    from nanomem.config import ConfigError
    from nanomem.config_file import changed_settings, current_text

    command = editor()
    try:
        original = current_text(config)
    except ConfigError:  # the editor is the way to repair it
        original = config.read_text(encoding="utf-8", errors="replace")
    fd, name = tempfile.mkstemp(dir=config.parent, prefix=f".{config.stem}-edit-", suffix=".toml")
    copy, keep = Path(name), False
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(original)
        while True:
            code = subprocess.call([*command, str(copy)])
            if code != 0:
                raise CliError(f"the editor ({command[0]}) exited with {code}; nothing changed")
            text = copy.read_text(encoding="utf-8", errors="replace")
            if text == original:
                print(f"no change to {config}")
                return 0
            try:
                _save(home, config, original, text)
            except ConfigError as exc:
                print(f"nanomem: {exc}", file=sys.stderr)
                if not _again():
                    print(f"nanomem: your changes were discarded; {config} is unchanged")
                    return EXIT_CONFIG
                continue
            except _ChangedMeanwhile:
                keep = True
                raise CliError(
                    f"{config} was changed by another command while you edited it; nothing "
                    f"was written. Your version is kept in {copy}"
                ) from None
            print(f"saved {config}")
            after(home, changed_settings(original, text))
            return 0
    finally:
        if not keep:
            copy.unlink(missing_ok=True)


class _ChangedMeanwhile(Exception):
    pass


def _save(home: Home, config: Path, original: str, text: str) -> None:
    from nanomem.config import ConfigError
    from nanomem.config_file import LOCK_WAIT_S, write_checked
    from nanomem.locks import LockBusy

    try:
        with home.lock("config").hold_sync(wait_s=LOCK_WAIT_S):
            now = config.read_text(encoding="utf-8", errors="replace") if config.exists() else ""
            if now != original:
                raise _ChangedMeanwhile
            write_checked(config, text)
    except LockBusy:
        raise ConfigError(f"config error: {config} is being changed elsewhere") from None


def _again() -> bool:
    """Edit again (a person at a terminal who says so) or discard (anyone else)."""
    if not sys.stdin.isatty():
        return False
    try:
        answer = input("Edit again (e) or discard your changes (d)? [E/d] ").strip().lower()
    except EOFError:
        return False
    return answer not in ("d", "discard")
