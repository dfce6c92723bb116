"""The chaos suite on demand: `python -m tests.chaos [options]` from the repository root.

Prints one table row per scenario, then what each run missed; exits 1 when any target of
issue 10 was missed, 0 when every one was met."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python tests/chaos/run.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from loguru import logger

from tests.chaos.harness import Options, run
from tests.chaos.report import Report, table

# Per scenario: kills, terms, chats, Dream kills (multi shares the home with other processes).
DEFAULTS = {"gateway": (20, 5, 20, 0), "multi": (5, 1, 6, 5)}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--scenario", choices=["gateway", "multi", "all"], default="gateway")
    parser.add_argument("--kills", type=int, help="SIGKILLs (gateway 20, multi 5)")
    parser.add_argument("--terms", type=int, help="SIGTERMs (gateway 5, multi 1)")
    parser.add_argument("--chats", type=int, help="Telegram chats (gateway 20, multi 6)")
    parser.add_argument("--messages", type=int, default=3, help="messages per chat")
    parser.add_argument("--latency", type=float, default=1.5, help="model latency of a turn, s")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dreams", type=int, default=20, help="multi: `nanomem dream` runs")
    parser.add_argument(
        "--dream-kills", type=int, help="multi: Dream runs SIGKILLed at random instants (5)"
    )
    parser.add_argument("--cli-turns", type=int, default=5, help="multi: turns per writer")
    parser.add_argument(
        "--cli-session",
        default="telegram:1000",
        help="multi: the writers' --session (a name, or a key such as the gateway's telegram:1000)",
    )
    parser.add_argument("--run-dir", type=Path, help="keep the home and logs here")
    return parser.parse_args(argv)


def options_for(scenario: str, args: argparse.Namespace) -> Options:
    kills, terms, chats, dream_kills = DEFAULTS[scenario]
    run_dir = args.run_dir / scenario if args.run_dir else None
    return Options(
        scenario=scenario,
        kills=kills if args.kills is None else args.kills,
        terms=terms if args.terms is None else args.terms,
        chats=chats if args.chats is None else args.chats,
        messages=args.messages,
        latency=args.latency,
        seed=args.seed,
        dreams=args.dreams,
        dream_kills=dream_kills if args.dream_kills is None else args.dream_kills,
        cli_turns=args.cli_turns,
        cli_session=args.cli_session,
        run_dir=run_dir,
    )


def _stop(signum: int, _: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through the harness, which ends its children


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    signal.signal(signal.SIGTERM, _stop)
    logger.remove()  # the loaders' warnings are counted by the checks, not printed
    # A killed gateway leaves requests half sent; the fakes' server logs each with a traceback.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    scenarios = ["gateway", "multi"] if args.scenario == "all" else [args.scenario]
    reports: list[Report] = []
    for scenario in scenarios:
        print(f"running the {scenario} scenario (seed {args.seed})...", flush=True)
        reports.append(run(options_for(scenario, args)))
    print(table(reports))
    for report in reports:
        print(report.details())
    return 1 if any(r.failures() for r in reports) else 0


if __name__ == "__main__":
    raise SystemExit(main())
