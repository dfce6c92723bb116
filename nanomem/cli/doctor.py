"""`nanomem doctor`: one line per check, ✓ / ! / ✗, what was found and the fix; exit 1 when
any check fails. Unlike `nanomem status` it calls out: the model, Telegram, MCP servers."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nanomem.config import Settings
    from nanomem.doctor.finding import Finding
    from nanomem.home import Home

# After a configuration error at the start of these commands, the next step.
HINTED = frozenset({"chat", "gateway"})
HINT = "nanomem: `nanomem doctor` checks the whole setup and says how to fix what fails"


def hint(command: str, code: int) -> str:
    """The line to print after an error that stopped `command` from starting ("" for none)."""
    from nanomem.cli.main import EXIT_CONFIG

    return f"\n{HINT}" if code == EXIT_CONFIG and command in HINTED else ""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    commands.add_parser(
        "doctor",
        help="check the setup: versions, config, model, channels, sandbox, MCP, gateway",
        description="Check what nanomem needs, one line per check with ✓ (fine), ! (a warning) "
        "or ✗ (fails) and the fix. It calls the model once (one token), Telegram's getMe "
        "and each MCP server. Exit 1 when a check fails.",
    )


def run(args: argparse.Namespace) -> int:
    import asyncio

    from nanomem.cli.main import CliError, _config_path, _home, _settings
    from nanomem.doctor import checks
    from nanomem.doctor.finding import Finding
    from nanomem.text.masking import (
        configured_secrets,
        register_environment_secrets,
        register_secrets,
    )

    register_environment_secrets()  # a server may echo a key it was sent: masked below
    home = _home(args)
    if args.config is None and not home.config.exists() and not home.workspace.exists():
        return _not_a_home(home)  # a typo in --home: no advice for a folder that is not one
    try:
        config = _config_path(args, home)
    except CliError as exc:
        config = home.config
        findings = [*checks.offline(home, config), Finding.fail("config", str(exc))]
    else:
        findings = checks.offline(home, config)
        try:
            settings = _settings(args, home)
        except CliError as exc:
            fix = f"correct it in {config} (or the variable named), then run nanomem doctor again"
            findings.append(Finding.fail("config", str(exc), fix))
        else:
            register_secrets(configured_secrets(settings))  # masked in every line below
            findings.append(_usable(settings, config))
            findings += asyncio.run(checks.online(home, settings))
    width = max(len(finding.name) for finding in findings)
    for finding in findings:
        print(finding.line(width))
    failed = sum(finding.level == "fail" for finding in findings)
    if failed:
        log = home.logs / "nanomem.log"
        where = f"; the log is {log}" if log.exists() else ""
        print(f"\n{failed} of {len(findings)} checks failed{where}")
    return 1 if failed else 0


def _not_a_home(home: Home) -> int:
    from nanomem.doctor.finding import Finding

    found = f"{home.root} is not a nanomem home (no config.toml, no workspace)"
    fix = f"`nanomem onboard --home {home.root}`, or check --home / NANOMEM_HOME"
    print(Finding.fail("home", found, fix).line(len("home")))
    return 1


def _usable(settings: Settings, config: Path) -> Finding:
    """What `nanomem chat` would stop on besides a syntax error: a model name no client can
    place, llm.proxy for a litellm model, a workspace that is not there."""
    from nanomem.cli import preflight
    from nanomem.config import ConfigError
    from nanomem.doctor.finding import Finding

    try:
        preflight.check_model_names(settings, config, {})
        if workspace := preflight.missing_workspace(settings, config, {}):
            raise preflight.workspace_missing_error(workspace, config, {})
    except ConfigError as exc:
        return Finding.fail("config", str(exc))  # it says where, and what to write
    shown = f"{config}" if config.exists() else f"{config} missing: defaults in use"
    return Finding.ok("config", f"{shown}, valid")
