"""`nanomem self update` and `nanomem self uninstall`: for a nanomem installed by
`python3 -m nanomem.install` (nanomem/install.py), which records its clone in the venv. The home
(~/.nanomem: config, memory, sessions) is kept by both; only `uninstall --purge` deletes it,
after asking."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nanomem.home import Home

GIT_TIMEOUT_S = 300  # a pull over a slow network; a hung one is stopped


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    itself = commands.add_parser(
        "self",
        help="update or uninstall this nanomem (installed by python3 -m nanomem.install)",
        description="update: git pull in the clone nanomem was installed from, then install "
        "again from its lock into the same venv. uninstall: remove the venv and the "
        "~/.local/bin/nanomem link; the home stays unless --purge (which asks first).",
    )
    action = itself.add_subparsers(dest="self_command", required=True, metavar="ACTION")
    action.add_parser("update", help="git pull in the clone, then install again")
    uninstall = action.add_parser("uninstall", help="remove the venv and the link; keep the home")
    uninstall.add_argument(
        "--purge", action="store_true", help="also delete the home, after asking at a terminal"
    )


def run(args: argparse.Namespace) -> int:
    from nanomem.cli.main import CliError, _home
    from nanomem.gateway_state import running
    from nanomem.install import read_record, recorded_links

    venv = Path(sys.prefix)
    record = read_record(venv)
    if record is None:
        raise CliError(
            f"this nanomem (in {venv}) was not installed by `python3 -m nanomem.install`; "
            "update or remove it the way it was installed (pipx, uv tool, pip)"
        )
    home = _home(args)
    if args.self_command == "update":
        code = update(Path(record["clone"]), venv, Path(record["link"]))
        if code == 0 and (gateway := running(home)) is not None:
            by_pid = f"kill -TERM {gateway.pid}" if gateway.pid else "stop it"
            print(
                f"nanomem: a gateway runs on this home ({gateway.describe()}): restart it to "
                f"use the update (`systemctl --user restart nanomem` when it runs as a "
                f"service; else {by_pid} and start `nanomem gateway` again)",
                file=sys.stderr,
            )
        return code
    if (gateway := running(home)) is not None:  # it would lose its program mid-message
        raise CliError(
            f"a gateway runs on {home.root} ({gateway.describe()}): stop it "
            f"first ({_stop_hint(gateway.pid)}), then uninstall again. Nothing was removed."
        )
    return uninstall(venv, recorded_links(venv), home, purge=args.purge)


def _stop_hint(pid: int | None) -> str:
    by_pid = f"`kill -TERM {pid}`" if pid else "stop it"
    return f"{by_pid}, or `systemctl --user stop nanomem` when it runs as a service"


def update(clone: Path, venv: Path, link: Path) -> int:
    import subprocess

    from nanomem.cli.main import CliError

    if not (clone / ".git").exists():
        raise CliError(f"the clone nanomem was installed from, {clone}, is gone or not a git clone")
    changed = _git(clone, "status", "--porcelain", "--untracked-files=no")
    if changed.strip():
        raise CliError(
            f"the clone {clone} has local changes (git -C {clone} status); commit or "
            "discard them, then run `nanomem self update` again. Nothing was changed."
        )
    print(f"Pulling in {clone}", flush=True)
    print(_git(clone, "pull", "--ff-only").strip(), flush=True)
    # The clone's installer, as just pulled, run by this venv's Python (3.11+ already): the
    # same venv and link, and the lock as it is now.
    command = [sys.executable, "-m", "nanomem.install", "--venv", str(venv), "--bin"]
    return subprocess.run([*command, str(link.parent)], cwd=clone, check=False).returncode


def _git(clone: Path, *args: str) -> str:
    import subprocess

    from nanomem.cli.main import CliError

    try:
        done = subprocess.run(
            ["git", "-C", str(clone), *args],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CliError(f"git {args[0]} in {clone} did not run: {exc}") from None
    if done.returncode != 0:
        raise CliError(f"git {args[0]} in {clone} failed: {done.stderr.strip()[-2000:]}")
    return done.stdout


def uninstall(venv: Path, links: list[Path], home: Home, *, purge: bool) -> int:
    import shutil

    from nanomem.cli.main import CliError
    from nanomem.install import LOCK, is_our_link
    from nanomem.locks import FileLock, LockBusy

    purge = purge and home.root.exists() and _may_purge(home)
    lock = FileLock(venv.parent / LOCK)
    try:
        lock.acquire_sync(wait_s=0)
    except LockBusy:
        raise CliError("an install or update is running; try again when it is done") from None
    if purge:  # first: once the venv is gone, this process can import nothing more
        shutil.rmtree(home.root)
        print(f"deleted {home.root}")
    try:
        for link in links:
            if is_our_link(link, venv):
                link.unlink()
                print(f"removed {link}")
        shutil.rmtree(venv)  # this process runs from it: the files it has open stay readable
        print(f"removed {venv}")
        (venv.parent / LOCK).unlink(missing_ok=True)
        if not any(venv.parent.iterdir()):
            venv.parent.rmdir()
    except OSError as exc:  # said with what is at hand: no import may follow the rmtree
        print(f"nanomem: uninstall stopped: {exc}; run it again", file=sys.stderr)
        return 1
    finally:
        lock.release()
    if not purge:
        print(f"Your home {home.root} (config, memory, sessions) is kept: an install finds it "
              f"again. To delete it: rm -r {home.root}")  # fmt: skip
    return 0


def _may_purge(home: Home) -> bool:
    """Asks, at a terminal only, before the home is deleted; CliError for anything but yes."""
    from nanomem.cli.main import CliError

    if not sys.stdin.isatty():
        raise CliError("--purge deletes your memory and asks first: run it at a terminal")
    try:
        answer = input(
            f"Delete {home.root} with your memory, sessions and config (its keys too)? "
            "This cannot be undone. Type 'delete' to confirm: "
        )
    except EOFError:
        answer = ""
    if answer.strip().lower() != "delete":
        raise CliError("nothing was deleted or removed")
    return True
