"""`nanomem usage`: tokens and cost per day and chat, from the home's usage.jsonl. Reads the
file only (no gateway, no model, no config needed), from its end back to the first day asked."""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nanomem.features.usage import Daily, Totals

MAX_DAYS = 3660
HOME_WORK = "(the home's own)"  # what is charged to no chat: Dream
COLUMNS = ("day", "chat", "calls", "prompt", "cached", "completion", "cost")


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    usage = commands.add_parser(
        "usage",
        help="token use and cost per day and chat (never calls the model)",
        description="Prompt, cached and completion tokens of every model call, as the "
        "provider reported them, per local day and chat, with the cost from litellm's price "
        "table where the model is in it (unknown where it is not).",
    )
    usage.add_argument(
        "--days", type=_days, default=7, help="the last N days, today included (default 7)"
    )
    usage.add_argument("--chat", metavar="KEY", help="only this chat (telegram:123, cli:direct)")
    usage.add_argument("--json", action="store_true", help="print JSON, for scripts")


def _days(text: str) -> int:
    try:
        days = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of days: {text!r}") from None
    if not 1 <= days <= MAX_DAYS:
        raise argparse.ArgumentTypeError(f"--days takes 1 to {MAX_DAYS}")
    return days


def run(args: argparse.Namespace) -> int:
    from nanomem.cli.main import CliError, _home
    from nanomem.features.usage import Pricing, daily, price_table

    if args.chat is not None and ":" not in args.chat:
        raise CliError(f"--chat takes a session key, channel:chat (cli:{args.chat}?)", 2)
    home = _home(args)
    try:
        found = daily(home.usage, args.days, time.time(), Pricing(price_table()), args.chat)
    except OSError as exc:
        raise CliError(f"cannot read {home.usage}: {exc.strerror or exc}") from None
    if args.json:
        print(json.dumps(found.as_json(), indent=2, ensure_ascii=False))
    else:
        print(text(found, args.chat))
    return 0


def text(found: Daily, chat: str | None) -> str:
    """A table of days and chats, the totals, and what has no price."""
    from nanomem.features.usage import dollars
    from nanomem.text.escapes import strip_escapes

    whose = f" in {strip_escapes(chat)}" if chat else ""
    head = f"Token use{whose} from {found.first_day} to {found.last_day} (local days)"
    if not found.total.calls:
        return f"{head}: no model calls recorded."
    rows = [list(COLUMNS)]
    for (day, key), totals in sorted(found.rows.items()):
        rows.append([day.isoformat(), strip_escapes(key) or HOME_WORK, *_figures(totals)])
    rows.append(["total", "", *_figures(found.total)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(
            cell.ljust(w) if i < 2 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]
    purposes = ", ".join(
        f"{name} {t.calls:,} ({t.cost_text()})" for name, t in sorted(found.purposes.items())
    )
    out = [head, "", *lines, "", f"by purpose: {purposes}"]
    unpriced = sorted(strip_escapes(m) for m, priced in found.priced.items() if not priced)
    if unpriced:
        out.append(f"cost unknown for {', '.join(unpriced)}: not in litellm's price table")
    if found.total.priced_cost and found.total.unpriced:
        out.append(f"known cost: {dollars(found.total.priced_cost)}")
    return "\n".join(out)


def _figures(totals: Totals) -> list[str]:
    return [
        f"{totals.calls:,}",
        f"{totals.prompt:,}",
        f"{totals.cached:,}",
        f"{totals.completion:,}",
        totals.cost_text(),
    ]
