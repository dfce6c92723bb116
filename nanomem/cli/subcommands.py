"""Commands kept in modules of their own. Each module named in MODULES has
`add_parser(commands)` and `run(args) -> int`; main.py builds and dispatches them from here, so a
new command is a module and one line below, not a longer main.py."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from types import ModuleType

# Modules of nanomem.cli; their top level imports nothing heavy (every command parses them all).
MODULES: tuple[str, ...] = ("parked", "self_command")


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


def handler(module: str) -> Callable[[argparse.Namespace], int]:
    run: Callable[[argparse.Namespace], int] = _module(module).run
    return run
