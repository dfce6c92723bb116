"""Commands kept in modules of their own. Each module named in MODULES has
`add_parser(commands)` and `run(args) -> int`; main.py builds and dispatches them from here, so a
new command is a module and one line below, not a longer main.py."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

# Modules of nanomem.cli; their top level imports nothing heavy (every command parses them all).
MODULES: tuple[str, ...] = (  # in the order `nanomem --help` lists them
    "config_command",
    "doctor",
    "usage_command",
    "parked",
    "export_command",
    "import_home",
    "import_command",
    "self_command",
    "web_link",
)


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"nanomem.cli.{name}")


def add_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> dict[str, str]:
    """Adds each module's parser; returns {command name: module name}."""
    owners: dict[str, str] = {}
    for name in MODULES:
        before = set(commands.choices)
        _module(name).add_parser(commands)
        owners.update(dict.fromkeys(set(commands.choices) - before, name))
    return owners


def home_options_anywhere(parser: argparse.ArgumentParser) -> None:
    """`--home` and `--config` accepted after any command too (`nanomem status --home X`), as
    well as before it; given in both places, the later one counts."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for command in dict.fromkeys(action.choices.values()):  # aliases share a parser
            # SUPPRESS: not given after the command, the value given before it stands.
            command.add_argument(
                "--home",
                type=Path,
                default=argparse.SUPPRESS,
                help="home folder (default $NANOMEM_HOME or ~/.nanomem)",
            )
            command.add_argument(
                "--config",
                type=Path,
                default=argparse.SUPPRESS,
                help="config file (default <home>/config.toml)",
            )
            home_options_anywhere(command)


def handler(module: str) -> Callable[[argparse.Namespace], int]:
    run: Callable[[argparse.Namespace], int] = _module(module).run
    return run
