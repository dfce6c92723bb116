"""The web app's token: made where none is set, like the agent API's key (onboard.py), by
`nanomem gateway` and by onboarding, which also offers to turn the web app on and shows the
new token once to the person at the terminal (never in a log)."""

from __future__ import annotations

import os
import sys
import tomllib
from collections.abc import Callable
from typing import TYPE_CHECKING

from nanomem.config import ENV_DELIMITER, ENV_PREFIX, ConfigError

if TYPE_CHECKING:
    from pathlib import Path

    from nanomem.config import GatewaySettings, Settings
    from nanomem.home import Home
    from nanomem.locks import FileLock

TOKEN_BYTES = 32  # secrets.token_urlsafe: 43 characters
TOKEN_VARIABLE = f"{ENV_PREFIX}WEB{ENV_DELIMITER}TOKEN"
QUESTION = "Use nanomem in a browser too (the web app, served by `nanomem gateway`)? [y/N] "


def web_address(gateway: GatewaySettings, port: int | None = None) -> str:
    """Where a browser on this machine reaches the web app (a wildcard host: loopback)."""
    host = gateway.host
    host = "127.0.0.1" if host in ("", "0.0.0.0") else "::1" if host == "::" else host
    shown = f"[{host}]" if ":" in host else host
    return f"{gateway.scheme}://{shown}:{gateway.port if port is None else port}"


def ensure_web_token(
    settings: Settings,
    config: Path,
    home: Home,
    *,
    offer: bool = False,
    ask: Callable[[str], str] = input,
    say: Callable[[str], None] = print,
) -> bool:
    """An enabled web app without web.token gets a new one in `config`; whether the file
    changed (the settings are then to be read again). With `offer` (`nanomem onboard` at a
    terminal) a web app that is off is offered first, and a token made is shown once."""
    web = settings.web
    if offer and not web.enabled:
        try:
            wanted = ask(QUESTION).strip().lower() in ("y", "yes")
        except EOFError:  # Ctrl-D: as good as no
            say("")
            wanted = False
        if not wanted:
            return False
    elif not web.enabled or web.token is not None:
        return False
    if web.token is None and any(name.upper() == TOKEN_VARIABLE for name in os.environ):
        print(
            f"nanomem: {TOKEN_VARIABLE} is empty, so no token is made in {config}", file=sys.stderr
        )
        return False
    try:
        made = create_web_token(config, home.lock("config"), enable=offer, make=web.token is None)
    except (OSError, ConfigError) as exc:
        print(f"nanomem: no token made for the web app: {exc}", file=sys.stderr)
        return False
    where = web_address(settings.gateway)
    if made and offer and sys.stdout.isatty():
        say(
            f"The web app is on: run `nanomem gateway`, open {where}/ and log in with this "
            f"token (shown this once; it is web.token in {config}):\n\n    {made}\n"
        )
    elif made:
        print(
            f"nanomem: the web app needs a login token: one was made and stored as web.token in "
            f"{config} (readable by you only); `nanomem web-link` prints a link that logs you in",
            file=sys.stderr,
        )
    elif offer:
        say(f"The web app is on: run `nanomem gateway` and open {where}/")
    return True


def create_web_token(
    config: Path, lock: FileLock, *, enable: bool = False, make: bool = True
) -> str | None:
    """Store a new web.token in `config` (mode 0600) under `lock` (not with `make` False: one
    set elsewhere wins), with `enable` also web.enabled = true; the token, or None when the
    file holds one already (made meanwhile) or none was to be made."""
    import secrets

    from nanomem.config_file import change, with_value

    token = secrets.token_urlsafe(TOKEN_BYTES)
    made: list[str] = []

    def with_token(text: str) -> str:
        if enable:
            text = with_value(text, ("web", "enabled"), True)
        if not make or tomllib.loads(text).get("web", {}).get("token"):
            return text
        made.append(token)
        return with_value(text, ("web", "token"), token)

    change(config, lock, with_token)
    return made[0] if made else None
