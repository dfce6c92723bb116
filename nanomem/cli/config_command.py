"""`nanomem config`: read and change config.toml by setting name (`set`, `get`, `unset`),
print its path, or edit it in $EDITOR; nothing the app would refuse is ever written (the
editing itself: nanomem/config_file.py)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nanomem.config_file import Setting
    from nanomem.home import Home


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    config = commands.add_parser(
        "config",
        help="show or change settings in config.toml (set, get, unset, path, edit)",
        description="Change config.toml by setting name, keeping its comments and layout; a "
        "change the app would refuse is not written. Keys are dotted: llm.model, "
        "telegram.allow_from, tools.shell_limits.memory_mb, mcp.servers.NAME.command.",
    )
    actions = config.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    set_ = actions.add_parser("set", help="set a setting: nanomem config set llm.model NAME")
    set_.add_argument("key", help="dotted setting name, e.g. telegram.enabled")
    set_.add_argument("value", help="true/false, a number, a list (4242,99 or [4242]), a text")
    get = actions.add_parser("get", help="a setting's value and where it comes from")
    get.add_argument("key", nargs="?", default="", help="a setting or table; none: all set")
    get.add_argument("--show-secret", action="store_true", help="print keys and tokens in full")
    unset = actions.add_parser("unset", help="back to the default (commented out in place)")
    unset.add_argument("key")
    actions.add_parser("path", help="print the config file's path")
    actions.add_parser("edit", help="edit the file in $VISUAL/$EDITOR; saved only if valid")


def run(args: argparse.Namespace) -> int:
    from nanomem.cli.main import EXIT_CONFIG, CliError, _config_path, _home
    from nanomem.config import ConfigError

    home = _home(args)
    config = _config_path(args, home)
    if args.config_command == "path":
        print(config)
        return 0
    try:
        if args.config_command == "get":
            return _get(args, home, config)
        if not config.exists():  # a home never set up: set it up as `chat` would
            from nanomem.cli.onboard import onboard

            onboard(home)
        if args.config_command == "edit":
            from nanomem.cli.config_edit import edit

            return edit(home, config, _after_change)
        return (
            _set(args, home, config) if args.config_command == "set" else _unset(args, home, config)
        )
    except ConfigError as exc:
        raise CliError(str(exc), EXIT_CONFIG) from None
    except OSError as exc:  # a folder we may not write in, a full disk
        raise CliError(f"cannot change {config}: {exc.strerror or exc}") from None


def _set(args: argparse.Namespace, home: Home, config: Path) -> int:
    from nanomem.config_file import parse_value, set_value, setting, shown

    target = setting(args.key)
    value = parse_value(target, args.value)
    if set_value(config, home.lock("config"), target, value):
        print(f"{target.key} = {shown(target, value)} in {config}")
        _after_change(home, [target])
    else:
        print(f"{target.key} is {shown(target, value)} already in {config}; nothing changed")
        _overridden(target)
    return 0


def _unset(args: argparse.Namespace, home: Home, config: Path) -> int:
    from nanomem.config_file import setting, shown, unset_value

    target = setting(args.key)
    if not unset_value(config, home.lock("config"), target):
        print(f"{target.key} is not set in {config}; nothing changed")
        return 0
    plain = target.default is None or target.table
    default = "" if plain else f" (its default: {shown(target, target.default)})"
    print(f"{target.key} unset in {config}{default}")
    _after_change(home, [target])
    return 0


def _after_change(home: Home, targets: list[Setting]) -> None:
    """What keeps the change from taking effect: a variable that wins over the file, a gateway
    that read the file before."""
    from nanomem.gateway.claim import running

    for target in targets:
        _overridden(target)
    if (gateway := running(home)) is not None:
        print(
            f"nanomem: a gateway runs on this home ({gateway.describe()}): restart it to use "
            "the change",
            file=sys.stderr,
        )


def _overridden(target: Setting) -> None:
    from nanomem.config import ENV_DELIMITER, ENV_PREFIX

    # NANOMEM_TELEGRAM='{...}' as much as NANOMEM_TELEGRAM__ENABLED
    names = {
        ENV_PREFIX + ENV_DELIMITER.join(target.path[:n]).upper()
        for n in range(1, len(target.path) + 1)
    }
    for name in sorted(n for n in os.environ if n.upper() in names):
        print(
            f"nanomem: warning: the environment variable {name} is set and wins over the file "
            f"for {target.key}",
            file=sys.stderr,
        )


def _get(args: argparse.Namespace, home: Home, config: Path) -> int:
    """One line per setting: `key = value  # where it comes from`. No key: those set in the
    file or the environment; a table: each of its settings."""
    from nanomem.cli.main import _settings
    from nanomem.config import Settings, read_toml
    from nanomem.config_file import known_keys, setting
    from nanomem.setting_source import from_environment

    settings = _settings(args, home)  # the effective values, as the app reads them
    file_data = read_toml(config) if config.exists() else {}
    configured = [*_set_keys(file_data), *_set_keys(from_environment(Settings, os.environ))]
    if not args.key:
        keys = sorted(set(configured))
        if not keys:
            print(f"nothing is set in {config} or the environment: every setting is its default")
    elif (target := setting(args.key)).table:
        named = [k for k in known_keys(target.path, target.path) if "NAME" not in k.split(".")]
        keys = list(
            dict.fromkeys(
                [*named, *(k for k in configured if k in named or k.startswith(target.key + "."))]
            )
        )
    else:
        keys = [target.key]
    for key in keys:
        print(_line(setting(key), settings, config, file_data, args.show_secret))
    return 0


def _set_keys(data: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[str]:
    """The settings `data` (the file's, or the environment's) gives a value."""
    from nanomem.config import ConfigError
    from nanomem.config_file import setting

    keys: list[str] = []
    for name, value in data.items():
        path = (*prefix, name)
        try:
            target = setting(".".join(path))
        except ConfigError:
            continue
        if target.table and isinstance(value, dict):
            keys += _set_keys(value, path)
        else:
            keys.append(target.key)
    return keys


def _line(
    target: Setting, settings: Any, config: Path, file_data: dict[str, Any], reveal: bool
) -> str:
    from nanomem.config_file import shown
    from nanomem.setting_source import source_in
    from nanomem.text.escapes import strip_escapes  # the file may hold anything

    value: Any = settings
    for part in target.path:
        value = value.get(part) if isinstance(value, dict) else getattr(value, part, None)
    source = source_in(target.path, config, file_data, {})
    return strip_escapes(f"{target.key} = {shown(target, value, reveal)}  # {source}")
