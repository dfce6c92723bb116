"""`nanomem import nanobot|openclaw|hermes [PATH]`: moving a person in from another agent. A dry
run unless `--apply`: it says what would go where and changes nothing (not even a lock file)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nanomem.config import Settings
    from nanomem.home import Home
    from nanomem.importers.apply import Target

PROJECTS = ("nanobot", "openclaw", "hermes")  # nanomem.importers.PROJECTS, without its import
NOT_FIRED = (
    "Imported schedules go to {chat}. A gateway fires schedules in the chats of channels that "
    "send on their own (Telegram); for a Telegram chat, import with --chat telegram:YOUR_ID."
)


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    command = commands.add_parser(
        "import",
        help="move in from nanobot, OpenClaw or Hermes Agent (a dry run unless --apply)",
        description="Imports another agent's identity, user profile, memory, skills, history "
        "and scheduled jobs into this home. Without --apply it only shows what would be "
        "imported where. Applied, the memory files change as one memory version, which "
        "`nanomem memory restore ID` undoes.",
    )
    command.add_argument("project", choices=PROJECTS)
    command.add_argument(
        "path",
        nargs="?",
        type=Path,
        help="its folder (default: ~/.nanobot, ~/.openclaw, ~/.hermes)",
    )
    command.add_argument("--apply", action="store_true", help="import (default: a dry run)")
    command.add_argument(
        "--chat",
        default="",
        help="the chat imported schedules run in, as channel:chat (default: the Telegram "
        "owner's chat if Telegram is on, else cli:direct)",
    )


def run(args: argparse.Namespace) -> int:
    from nanomem.cli.main import CliError, _home, _settings
    from nanomem.importers import reader
    from nanomem.importers.plan import describe
    from nanomem.importers.source import SourceError, SourceTree
    from nanomem.memory import GitStoreError
    from nanomem.text.escapes import strip_escapes

    default, read = reader(args.project)
    path = args.path or default.expanduser()
    if args.path is None and not path.is_dir():
        raise CliError(
            f"{path} does not exist; give the folder: nanomem import {args.project} PATH", 2
        )
    chat = args.chat.strip()
    if chat and (":" not in chat or chat.startswith(":") or len(chat) > 200):
        raise CliError(f"--chat {chat[:80]!r} is not channel:chat (telegram:123, cli:direct)", 2)
    try:
        found = read(SourceTree.open(path))
    except SourceError as exc:
        raise CliError(f"cannot import from {path}: {exc}", 2) from None
    home = _home(args)
    if args.apply and not home.config.exists() and args.config is None:
        from nanomem.cli.onboard import onboard

        onboard(home)
    settings = _settings(args, home)
    from nanomem.text.masking import (
        configured_secrets,
        register_environment_secrets,
        register_secrets,
    )

    # As every writer of the archive: a known key quoted in the other agent's history is masked.
    register_environment_secrets()
    register_secrets(configured_secrets(settings))
    target = _target(home, settings, chat or _default_chat(settings))
    from nanomem.features.schedules import ScheduleError
    from nanomem.gateway.claim import running
    from nanomem.importers.apply import apply, plan
    from nanomem.locks import LockBusy

    version = None
    try:
        if args.apply:
            done, version = apply(found, target)
        else:
            done = plan(found, target)
    except (GitStoreError, ScheduleError, LockBusy, OSError) as exc:
        stopped = "nothing more was imported" if args.apply else "the dry run stopped"
        raise CliError(f"{stopped}: {exc}") from None
    print(strip_escapes(describe(done, applied=args.apply)))  # names from the source
    if version is not None:
        print(
            f"\nSaved as memory version {version.short}: `nanomem memory restore "
            f"{version.short}` (or /dream-restore {version.short}) undoes this import."
        )
    if done.schedules and not target.session.startswith("telegram:"):
        print(f"\n{NOT_FIRED.format(chat=target.session, project=args.project)}")
    elif done.schedules and args.apply and running(home) is not None:
        print("\nA gateway runs on this home: restart it to arm the imported schedules.")
    return 0


def _default_chat(settings: Settings) -> str:
    owner = settings.telegram.owner_id
    return f"telegram:{owner}" if settings.telegram.enabled and owner else "cli:direct"


def _target(home: Home, settings: Settings, chat: str) -> Target:
    from nanomem.app import workspace_of
    from nanomem.features.schedules import ScheduleStore
    from nanomem.importers.apply import Target
    from nanomem.memory import GitStore, HistoryStore

    workspace = workspace_of(settings, home)
    return Target(
        home,
        workspace,
        GitStore(home.memory_git, workspace, lock=home.lock("memory")),
        HistoryStore(workspace / "memory", home.lock("history"), within=workspace),
        ScheduleStore.of(home, settings.schedule),
        chat,
    )
