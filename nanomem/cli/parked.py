"""`nanomem inbox`: the owner's say over messages whose handling kept failing (parked after
`agent.max_attempts`, see agent/retries.py) — list them, try one again, or drop it. Also what
`nanomem status` shows of them. Works while the gateway runs: it notices a retry within
seconds."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nanomem.home import Home

USAGE = "usage: nanomem inbox [list | retry ID | drop ID] (IDs as `nanomem inbox` lists them)"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    inbox = commands.add_parser(
        "inbox",
        help="list parked messages (their handling kept failing); retry or drop one",
        description="Messages whose handling failed inside nanomem are tried again with "
        "backoff; after agent.max_attempts they are parked: kept, never tried again on their "
        "own. List them, try one once more (`retry ID`), or remove it for good (`drop ID`).",
    )
    inbox.add_argument("action", nargs="?", default="list", choices=("list", "retry", "drop"))
    inbox.add_argument("id", nargs="?", default="", help="a parked message's id (#N in the list)")


def status_lines(home: Home) -> list[tuple[str, str]]:
    """`nanomem status` rows: how many messages are parked, then one line each."""
    import sqlite3  # here, not at import: `nanomem chat` reaches its prompt without it

    from nanomem.agent import parked_in, parked_line

    try:
        parked = parked_in(home.inbox)
    except sqlite3.Error as exc:  # busy past the timeout, or damaged: said, not hidden
        return [("parked", f"unknown (cannot read {home.inbox}: {exc})")]
    if not parked:
        return [("parked", "none")]
    rows = [("parked", f"{len(parked)} (nanomem inbox retry ID, or drop ID)")]
    return rows + [("", parked_line(p)) for p in parked]


def run(args: argparse.Namespace) -> int:
    from nanomem.cli.main import _home

    code, text = act(_home(args), args.action, args.id)
    print(text, file=sys.stderr if code else sys.stdout)
    return code


def act(home: Home, action: str, ident: str) -> tuple[int, str]:
    """(exit code, what to print)."""
    import sqlite3

    from nanomem.agent import drop_in, parked_in, parked_line, unpark_in

    if action == "list":
        try:
            parked = parked_in(home.inbox)
        except sqlite3.Error as exc:
            return 1, f"Cannot read {home.inbox}: {exc}"
        return 0, "\n".join(parked_line(p) for p in parked) or "No parked messages."
    seq = ident.removeprefix("#")
    if not seq.isdigit():
        return 2, USAGE
    if action == "retry":
        if not unpark_in(home.inbox, int(seq)):
            return 1, f"No parked message #{seq} (`nanomem inbox` lists them)."
        return 0, f"Message #{seq} is tried again now by the gateway (or at its next start)."
    if not drop_in(home.inbox, int(seq)):
        return 1, f"No parked or failed message #{seq} (`nanomem inbox` lists them)."
    return 0, f"Message #{seq} was dropped; it will not be answered."
