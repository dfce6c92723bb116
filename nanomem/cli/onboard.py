"""Creating and repairing a home folder: config.toml, workspace/ (a copy of workspace-template/)."""

from __future__ import annotations

import os
import shutil
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from nanomem.agent import Templates, bundled_dir
from nanomem.config import ENV_DELIMITER, ENV_PREFIX, ConfigError, Settings
from nanomem.durable import atomic_write_text
from nanomem.home import Home
from nanomem.locks import FileLock
from nanomem.memory import GitStore
from nanomem.private import make_private

API_KEY_BYTES = 32  # secrets.token_urlsafe: 43 characters
KEYS_VARIABLE = f"{ENV_PREFIX}API{ENV_DELIMITER}KEYS"


@dataclass
class OnboardReport:
    created: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)
    tightened: list[Path] = field(default_factory=list)  # were readable by others


def onboard(
    home: Home,
    workspace: Path | None = None,
    *,
    model: str = "",
    api_key: str = "",
    api_base: str = "",
) -> OnboardReport:
    """Create what is missing; never touch a file that already exists."""
    report = OnboardReport()
    for folder in (home.root, home.sessions, home.logs):
        folder.mkdir(parents=True, exist_ok=True)
    home.root.chmod(0o700)
    with home.lock("config").hold_sync():  # a `config set` elsewhere may be making it too
        if home.config.exists():
            report.kept.append(home.config)
        else:
            text = Templates().render(
                "config.toml.j2", model=model, api_key=api_key, api_base=api_base
            )
            atomic_write_text(home.config, text + "\n", mode=0o600)
            report.created.append(home.config)
    target = workspace or home.workspace
    source = bundled_dir("workspace-template")
    for src in sorted(source.rglob("*")):
        dest = target / src.relative_to(source)
        if src.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
        elif dest.exists():
            report.kept.append(dest)
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
            report.created.append(dest)
    GitStore(home.memory_git, target, lock=home.lock("memory")).ensure()  # the first version
    report.tightened = make_private(home)
    return report


def set_config_values(
    path: Path, section: str, values: Mapping[str, object], lock: FileLock
) -> None:
    """Set each `key = value` under `[section]` in one write under `lock`, as `nanomem config
    set` places it (comments kept, a commented default uncommented in place, nothing invalid
    written); CliError (exit 2) when it cannot be."""
    from nanomem.cli.main import EXIT_CONFIG, CliError
    from nanomem.config_file import set_values

    try:
        set_values(path, lock, section, values)
    except ConfigError as exc:
        raise CliError(str(exc), EXIT_CONFIG) from None


def ensure_secrets(settings: Settings, config: Path, home: Home, command: str = "") -> bool:
    """What each enabled door needs to let its owner in: the agent API's key and the web app's
    token, made where missing (`nanomem onboard` at a terminal also offers the web app); whether
    the file changed (the settings are then to be read again)."""
    from nanomem.cli.web_setup import ensure_web_token

    made_key = ensure_api_key(settings, config, home)
    offer = command == "onboard" and sys.stdin.isatty()
    return ensure_web_token(settings, config, home, offer=offer) or made_key


def ensure_api_key(settings: Settings, config: Path, home: Home) -> bool:
    """The agent API always asks for a key: an enabled API without one gets a new key in
    `config`; whether it did (the settings are then to be read again). What stands in the way
    is said on stderr, and the API, still without a key, refuses to start."""
    if not settings.api.enabled or settings.api.keys:
        return False
    if any(name.upper() == KEYS_VARIABLE for name in os.environ):  # it would hide the file's
        print(
            f"nanomem: {KEYS_VARIABLE} lists no key, so none is made in {config}", file=sys.stderr
        )
        return False
    try:
        created = create_api_key(config, home.lock("config"))
    except (OSError, ConfigError) as exc:
        print(f"nanomem: no key made for the agent API: {exc}", file=sys.stderr)
        return False
    if created:
        print(
            f"nanomem: the agent API needs a key: one was made and stored as api.keys in "
            f"{config} (readable by you only; `nanomem status` shows it masked)",
            file=sys.stderr,
        )
    return True


def create_api_key(config: Path, lock: FileLock) -> bool:
    """Store a new agent API key as api.keys in `config` (mode 0600), under `lock`; False when
    the file holds keys already (another process made them meanwhile). The key is never
    printed: its owner reads it in the file. ConfigError when the file cannot take it as is."""
    import secrets  # hmac and base64 under it: ~10 ms that every start would pay

    from nanomem.config_file import change, with_value

    def with_key(text: str) -> str:
        if tomllib.loads(text).get("api", {}).get("keys"):
            return text
        return with_value(text, ("api", "keys"), [secrets.token_urlsafe(API_KEY_BYTES)])

    return change(config, lock, with_key)
