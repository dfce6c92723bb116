"""Checks of this machine alone: Python and the packages, the home's permissions, disk space
and the shell's sandbox."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

from nanomem.config import Settings
from nanomem.doctor.finding import Finding
from nanomem.home import Home

MIN_PYTHON = (3, 11)
LOW_DISK_BYTES = 2**30  # under this free on the home's filesystem: a warning
# Distributions nanomem cannot run without, by the name pip knows them.
PACKAGES = ("nanomem", "litellm", "pydantic", "httpcore", "python-telegram-bot", "dulwich", "mcp")


def versions() -> Finding:
    from importlib.metadata import PackageNotFoundError, version

    python = ".".join(map(str, sys.version_info[:3]))
    if sys.version_info[:2] < MIN_PYTHON:
        need = ".".join(map(str, MIN_PYTHON))
        return Finding.fail("versions", f"Python {python}", f"install Python {need} or newer")
    found, missing = [f"Python {python}"], []
    for name in PACKAGES:
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            missing.append(name)
    if missing:
        fix = "pip install -e . in the checkout (or reinstall nanomem)"
        return Finding.fail("versions", f"not installed: {', '.join(missing)}", fix)
    return Finding.ok("versions", ", ".join(found))


def permissions(home: Home, config: Path) -> Finding:
    """The home 0700 and config.toml 0600, both owned by this user."""
    if not home.root.is_dir():
        return Finding.fail("home", f"{home.root} does not exist", "nanomem onboard")
    problems: list[str] = []
    fixes: list[str] = []
    for path, wanted in ((home.root, 0o700), (config, 0o600)):
        try:
            info = path.stat()
        except FileNotFoundError:
            continue  # a missing config is the config check's to say
        mode = stat.S_IMODE(info.st_mode)
        if info.st_uid != os.getuid():
            problems.append(f"{path} belongs to user id {info.st_uid}, not you ({os.getuid()})")
            fixes.append(f"chown {os.getuid()} {path}")
        if mode & 0o077:
            problems.append(f"{path} is {mode:o} (others may read it)")
            fixes.append(f"chmod {wanted:o} {path}")
    if problems:
        return Finding.fail("home", "; ".join(problems), "; ".join(fixes))
    return Finding.ok("home", f"{home.root} private (700), config.toml 600, yours")


def disk(home: Home) -> Finding:
    where = home.root if home.root.exists() else home.root.parent
    try:
        free = shutil.disk_usage(where).free
    except OSError as exc:
        return Finding.warn("disk", f"cannot tell the free space of {where} ({exc.strerror})")
    shown = f"{free / 2**30:.1f} GB free on the filesystem of {where}"
    if free < LOW_DISK_BYTES:
        return Finding.warn("disk", shown, "free some space: sessions and memory grow there")
    return Finding.ok("disk", shown)


def sandbox(settings: Settings) -> Finding | None:
    """Whether the shell's commands run in bubblewrap (the probe `nanomem status` also uses:
    bwrap runs a trivial command); None when the shell is off."""
    from nanomem.tools import Limits, decide

    tools = settings.tools
    if not tools.shell_enabled:
        return None
    decision = decide(tools.shell_sandbox)
    limits = Limits(**tools.shell_limits.model_dump())
    shown = decision.describe(tools.shell_network, tools.shell_network_groups, limits)
    if decision.binary is not None:
        return Finding.ok("sandbox", shown)
    if decision.refuses:
        fix = "allow user namespaces (docs/troubleshooting.md), or set tools.shell_sandbox"
        return Finding.fail("sandbox", shown, fix)
    if decision.mode == "off":
        return Finding.warn("sandbox", shown, "nanomem config set tools.shell_sandbox auto")
    fix = "allow user namespaces for bwrap (Docker: see docs/troubleshooting.md)"
    return Finding.warn("sandbox", shown, fix)
