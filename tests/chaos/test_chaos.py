"""The chaos suite's fast variant (issue 10): the real gateway killed 3 times and stopped once
under a faster model, with a few chats; and a small run of several processes on one home. The
full runs are `python -m tests.chaos` (see tests/chaos/run.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.harness import Options, run
from tests.chaos.report import Report, table

# The code before issue 10's fixes loses acknowledged messages on every kill and SIGTERM and
# interleaves two `chat -m` on one session, so these runs miss their targets there (that is how
# the suite proves it can see losses). Set to False once the durable inbox, the home-wide locks
# and the crash-atomic Dream are merged: from then on a missed target fails the test.
BASELINE = False
# The final drain gives up after this long without a new reply. A run that meets its targets
# ends it as soon as the last message is answered, so this bounds only a run that lost one; it
# must outlast a restarted gateway's first answer on a loaded machine, which 6 s may not.
QUIET_S = 20.0


def judge(report: Report, *, sent: int, kills: int, terms: int) -> None:
    shown = f"{table([report])}\n{report.details()}"
    # The run itself must have happened as planned, baseline or not.
    assert (report.sent, report.kills, report.terms) == (sent, kills, terms), shown
    assert report.files_checked > 0, shown
    missed = report.failures()
    if BASELINE:
        if missed:
            pytest.xfail(f"baseline before issue 10's fixes:\n{shown}")
        pytest.fail(f"every target was met: set BASELINE = False in {__file__}\n{shown}")
    assert missed == [], shown


def test_gateway_killed_and_restarted_loses_nothing(tmp_path: Path) -> None:
    options = Options(
        "gateway", kills=3, terms=1, chats=4, latency=0.5, seed=7, quiet_s=QUIET_S, run_dir=tmp_path
    )
    judge(run(options), sent=12, kills=3, terms=1)


def test_several_processes_on_one_home_keep_everything_once(tmp_path: Path) -> None:
    options = Options(
        "multi",
        kills=1,
        terms=1,
        chats=2,
        messages=2,
        latency=0.5,
        seed=11,
        quiet_s=QUIET_S,
        dreams=4,
        dream_kills=1,
        cli_turns=2,
        run_dir=tmp_path,
    )
    judge(run(options), sent=4, kills=1, terms=1)
