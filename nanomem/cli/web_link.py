"""`nanomem web-link`: a link that logs into the web app once, within ten minutes; the code is
kept in the home (hashed), so it works with the gateway already running."""

from __future__ import annotations

import argparse
import sys


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    commands.add_parser(
        "web-link",
        help="print a link that logs into the web app once (valid for 10 minutes)",
        description="Prints http://<gateway.host>:<gateway.port>/login/<code>: opened in a "
        "browser, it logs into the web app without the token. The code works once, for the "
        "next 10 minutes; the home keeps only its hash.",
    )


def run(args: argparse.Namespace) -> int:
    from nanomem.cli.main import EXIT_CONFIG, CliError, _home, _settings
    from nanomem.cli.web_setup import web_address
    from nanomem.gateway_state import running
    from nanomem.web_logins import VALID_S, new_code

    home = _home(args)
    if not home.config.is_file():
        raise CliError(f"no nanomem home at {home.root}: run `nanomem onboard` first")
    settings = _settings(args, home)
    if not settings.web.enabled:
        raise CliError(
            "the web app is off: `nanomem config set web.enabled true`, then start "
            "`nanomem gateway`",
            EXIT_CONFIG,
        )
    gateway = running(home)
    try:
        code = new_code(home)
    except OSError as exc:
        raise CliError(f"cannot store the login code in {home.root}: {exc.strerror}") from None
    port = gateway.port if gateway is not None and gateway.port else None
    print(f"{web_address(settings.gateway, port)}/login/{code}")
    later = "" if gateway is not None else " (start `nanomem gateway` to open it)"
    proxy = (
        "; through your reverse proxy, open /login/<code> at its address"
        if settings.web.behind_proxy
        else ""
    )
    print(f"Logs in once, within {VALID_S / 60:g} minutes{later}{proxy}.", file=sys.stderr)
    return 0
