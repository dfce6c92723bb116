"""`nanomem import-home FILE`: a home restored from `nanomem export`'s archive
(nanomem/home_import.py), refusing to replace a home that holds memory unless told to."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nanomem.config import Settings
    from nanomem.home import Home
    from nanomem.home_import import Imported


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    restore = commands.add_parser(
        "import-home",
        help="restore a home from `nanomem export`'s archive",
        description="Checks the archive whole (paths, sizes, checksums), then restores it as "
        "the home (`nanomem --home DIR import-home FILE` for another). A home that already "
        "holds memory is kept unless --force; then it is moved aside first, never deleted.",
    )
    restore.add_argument("file", type=Path, help="the .tar.gz `nanomem export` wrote")
    restore.add_argument(
        "--force",
        action="store_true",
        help="replace a home that holds memory (it is renamed to HOME.before-import-TIME)",
    )


def run(args: argparse.Namespace) -> int:
    from nanomem.cli.main import CliError, _home
    from nanomem.gateway.claim import running
    from nanomem.home_archive import ArchiveError
    from nanomem.home_import import HomeInUse, import_home, read_archive

    home = _home(args)
    if str(args.file) == "-":
        raise CliError(
            "import-home reads a file, twice (checked whole, then restored): save it first", 2
        )
    try:
        read_archive(args.file.expanduser())
    except ArchiveError as exc:
        raise CliError(f"{args.file}: {exc}; nothing was changed", 2) from None
    if (found := _memory_in(args, home)) and not args.force:
        listed = "\n  ".join(found)
        raise CliError(
            f"{home.root} already holds memory:\n  {listed}\n"
            "Nothing was changed. To replace it (it is moved aside, not deleted): "
            f"nanomem --home {home.root} import-home {args.file} --force"
        )
    if running(home):
        raise CliError(f"a gateway runs on {home.root}; stop it, then import again")
    try:
        done = import_home(args.file.expanduser(), home)
    except ArchiveError as exc:
        raise CliError(f"{args.file}: {exc}; nothing was changed", 2) from None
    except HomeInUse as exc:
        raise CliError(f"{exc}; nothing was changed") from None
    except OSError as exc:
        raise CliError(f"cannot restore into {home.root}: {exc}; nothing was changed") from None
    _report(args, home, done)
    return 0


def _memory_in(args: argparse.Namespace, home: Home) -> list[str]:
    from nanomem.agent import bundled_dir
    from nanomem.app import workspace_of
    from nanomem.cli.main import CliError, _settings
    from nanomem.home_import import holds_memory

    if not home.root.exists():
        return []
    try:
        workspace = workspace_of(_settings(args, home), home)
    except CliError:  # a broken config: the home's own workspace is where memory would be
        workspace = home.workspace
    return holds_memory(home, workspace, bundled_dir("workspace-template"))


def _report(args: argparse.Namespace, home: Home, done: Imported) -> None:
    from nanomem.agent import Templates
    from nanomem.cli.main import CliError, _settings, version
    from nanomem.cli.status import status_rows
    from nanomem.text.plural import plural

    manifest = done.manifest
    problem, rows, runs = "", [], []
    try:
        settings = _settings(args, home)
        rows = status_rows(home, settings, home.config, version())
        runs = _what_runs(home, settings)
    except CliError as exc:  # the restored config, checked as `nanomem status` checks it
        problem = str(exc)
    print(
        Templates().render(
            "home_imported.md.j2",
            home=str(home.root),
            files=plural(len(manifest.files), "file"),
            created=manifest.created,
            made_by=manifest.nanomem,
            aside=str(done.moved_aside or ""),
            secrets=manifest.secrets_removed,
            problem=problem,
            runs=runs,
        )
    )
    width = max((len(name) for name, _ in rows), default=0)
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")


def _what_runs(home: Home, settings: Settings) -> list[str]:
    """What the restored settings start or allow without asking: an archive from someone else
    would bring its programs along (MCP servers start with the chat and the gateway)."""
    import shlex

    from nanomem.features.shell_approval import Allowlist
    from nanomem.text.escapes import strip_escapes
    from nanomem.text.masking import shown_url

    runs = []
    for name, server in settings.mcp.servers.items():
        if server.enabled and server.command is not None:
            runs.append(f"mcp.servers.{name} starts: {shlex.join([server.command, *server.args])}")
        elif server.enabled and server.url is not None:
            runs.append(f"mcp.servers.{name} connects to {shown_url(server.url)}")
    if settings.tools.shell_enabled:
        allowed = Allowlist(home.shell_allowlist, home.lock("shell-allowlist")).prefixes()
        runs += [f"the shell runs without asking: {prefix}" for prefix in allowed]
    return [strip_escapes(line) for line in runs]
