"""`nanomem status` and `nanomem inbox`: the owner sees parked messages and retries or drops
them (the real CLI in-process; the inbox a gateway would have left)."""

from __future__ import annotations

from nanomem.agent.inbox import SqliteInbox
from nanomem.home import Home
from nanomem.log import register_secrets
from tests.conftest import cli_env, run_cli_here
from tests.helpers.inbox import parked_message

SECRET = "sk-live-0123456789abcdefghijklmnop"


def test_status_lists_parked_messages_and_says_none_otherwise(home: Home) -> None:
    assert "parked          none" in run_cli_here("status", env=cli_env(home)).stdout
    seq = parked_message(home, "please remember the milk")
    status = run_cli_here("status", env=cli_env(home))
    assert status.returncode == 0, status.stderr
    assert "parked          1 (nanomem inbox retry ID, or drop ID)" in status.stdout
    (line,) = [line for line in status.stdout.splitlines() if "milk" in line]
    assert f"#{seq} telegram:1002" in line and "“please remember the milk”" in line
    assert "3 attempts" in line and "IsADirectoryError" in line


def test_retry_unparks_and_drop_removes_for_good(home: Home) -> None:
    seq = parked_message(home, "first")
    other = parked_message(home, "second")
    listed = run_cli_here("inbox", env=cli_env(home))
    assert listed.returncode == 0 and f"#{seq} " in listed.stdout and f"#{other} " in listed.stdout
    retried = run_cli_here("inbox", "retry", str(seq), env=cli_env(home))
    assert retried.returncode == 0 and "tried again" in retried.stdout
    dropped = run_cli_here("inbox", "drop", f"#{other}", env=cli_env(home))
    assert dropped.returncode == 0 and "dropped" in dropped.stdout
    inbox = SqliteInbox(home.inbox)
    assert inbox.parked() == [] and [p.seq for p in inbox.retrying()] == [seq]
    inbox.close()
    assert run_cli_here("inbox", env=cli_env(home)).stdout.strip() == "No parked messages."


def test_a_wrong_id_changes_nothing_and_says_so(home: Home) -> None:
    assert run_cli_here("inbox", "retry", "7", env=cli_env(home)).returncode == 1
    assert not home.inbox.exists()  # nothing created by asking
    seq = parked_message(home, "kept")
    for args, code in [
        (("retry", "abc"), 2),
        (("drop", ""), 2),
        (("retry", str(seq + 1)), 1),
        (("drop", str(seq + 1)), 1),
    ]:
        result = run_cli_here("inbox", *args, env=cli_env(home))
        assert result.returncode == code and "Traceback" not in result.stdout + result.stderr
    assert run_cli_here("inbox", "list", env=cli_env(home)).stdout.startswith(f"#{seq} ")


def test_a_secret_in_a_parked_message_is_never_listed(home: Home) -> None:
    register_secrets([SECRET])
    parked_message(home, f"my key is {SECRET} please keep it")
    status = run_cli_here("status", env=cli_env(home))
    assert SECRET not in status.stdout and "my key is" in status.stdout


def test_an_inbox_that_cannot_be_read_is_said_not_hidden(home: Home) -> None:
    home.inbox.write_bytes(b"this is not a database" * 100)
    status = run_cli_here("status", env=cli_env(home))
    assert status.returncode == 0 and "parked          unknown (cannot read" in status.stdout
    listed = run_cli_here("inbox", env=cli_env(home))
    assert listed.returncode == 1 and "Cannot read" in listed.stderr
    assert "Traceback" not in status.stdout + status.stderr + listed.stdout + listed.stderr
