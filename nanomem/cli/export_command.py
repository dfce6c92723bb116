"""`nanomem export [FILE]`: the home in one tar.gz, without secrets (nanomem/home_export.py)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, TextIO

if TYPE_CHECKING:
    from nanomem.home import Home
    from nanomem.home_export import Exported


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    export = commands.add_parser(
        "export",
        help="write the home (memory and its versions, sessions, schedules, workspace) to a "
        "tar.gz, without secrets",
        description="Writes a snapshot of the home to a tar.gz: memory with its versions, the "
        "history, sessions, schedules, the workspace and config.toml with every secret left "
        "out. Logs and caches stay behind. Restore it with `nanomem import-home FILE`.",
    )
    export.add_argument(
        "file",
        nargs="?",
        default="",
        help="where to write it (default: nanomem-home-YYYYMMDD-HHMMSS.tar.gz here; - for stdout)",
    )


def run(args: argparse.Namespace) -> int:
    from nanomem.cli.main import CliError, _home, version
    from nanomem.home_archive import ArchiveError
    from nanomem.home_export import archive_name, export_home

    home = _home(args)
    if not home.config.is_file() and not home.workspace.is_dir():
        raise CliError(f"no nanomem home at {home.root} (nothing to export)")
    workspace, secrets = _settings_of(args, home)
    to_stdout = args.file == "-"
    if to_stdout and sys.stdout.isatty():
        raise CliError("not writing an archive to a terminal: name a file, or pipe it", 2)
    target = Path(args.file or archive_name())
    try:
        if to_stdout:
            sys.stdout.flush()
            done = export_home(
                home, workspace, sys.stdout.buffer, secrets=secrets, version=version()
            )
        else:
            done = _to_file(
                target,
                lambda out: export_home(home, workspace, out, secrets=secrets, version=version()),
            )
    except ArchiveError as exc:
        raise CliError(str(exc)) from None
    _report(
        done,
        "standard output" if to_stdout else str(target),
        sys.stderr if to_stdout else sys.stdout,
    )
    return 0


def _settings_of(args: argparse.Namespace, home: Home) -> tuple[Path, list[str]]:
    """The workspace in use and every secret the settings hold (from the file and the
    environment), whose values no archived byte may hold."""
    from nanomem.app import workspace_of
    from nanomem.cli.main import CliError, _settings
    from nanomem.text.masking import configured_secrets, environment_secrets

    try:
        settings = _settings(args, home)
    except CliError as exc:  # a broken config is still exported, without its secrets
        print(f"nanomem: note: {exc}", file=sys.stderr)
        return home.workspace, environment_secrets()
    return workspace_of(settings, home), configured_secrets(settings) + environment_secrets()


def _to_file(target: Path, write: Callable[[BinaryIO], Exported]) -> Exported:
    """Written beside `target` under a temporary name, then linked into place: a file by that
    name is never replaced, and never seen half written."""
    import os
    import tempfile

    from nanomem.cli.main import CliError
    from nanomem.durable import fsync_dir

    if target.exists() or target.is_symlink():
        raise CliError(f"{target} exists; name another file", 2)
    folder = target.parent if str(target.parent) else Path()
    try:
        fd, partial = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".partial")
    except OSError as exc:
        raise CliError(f"cannot write in {folder.resolve()}: {exc.strerror}", 2) from None
    try:
        with os.fdopen(fd, "wb") as out:  # mkstemp: mode 0600
            done = write(out)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(partial, target)
        except FileExistsError:
            raise CliError(f"{target} exists; name another file", 2) from None
        fsync_dir(folder)
    finally:
        Path(partial).unlink(missing_ok=True)
    return done


def _report(done: Exported, where: str, out: TextIO) -> None:
    from nanomem.agent import Templates
    from nanomem.text.plural import plural

    files = done.manifest.files
    parts: dict[str, int] = {}
    for entry in files:
        top = entry.path.split("/")[0]
        parts[top] = parts.get(top, 0) + 1
    print(
        Templates().render(
            "home_exported.md.j2",
            where=where,
            archive=_size(done.archive_bytes),
            unpacked=_size(done.manifest.total),
            files=plural(len(files), "file"),
            parts=[(name, plural(count, "file")) for name, count in sorted(parts.items())],
            secrets=done.manifest.secrets_removed,
            dropped=done.dropped,
            left_out=done.left_out,
        ),
        file=out,
    )


def _size(n: int) -> str:
    if n < 1000:
        return f"{n} bytes"
    return f"{n / 1e3:.1f} KB" if n < 1e6 else f"{n / 1e6:.1f} MB"
