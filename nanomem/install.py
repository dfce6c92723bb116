"""Installs nanomem from its clone so that `nanomem` is on the PATH: `python3 -m nanomem.install`
(add `--chat` to start chatting right after). Standard library only, since it runs before
anything is installed: a virtual environment (default ~/.local/share/nanomem/venv, outside the
clone, so `bash .ci/run`'s .venv and a `git clean` there never change what `nanomem` runs), the
hash-locked requirements.lock, nanomem's own wheel built with the hash-locked build backend, and
a link ~/.local/bin/nanomem to the venv's command. The clone is recorded in the venv for
`nanomem self update` and `nanomem self uninstall` (nanomem/cli/self_command.py).

Written for any python3 to read, so an old one says what it needs instead of a syntax error."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

MINIMUM = (3, 11)
RECORD = "nanomem-install.json"  # in the venv: that it is ours, and where it came from
RECORD_VERSION = 1
LOCK = "install.lock"  # beside the venv: one install, update or uninstall at a time
PIP = ("-m", "pip", "--disable-pip-version-check")
RECORD_KEYS = ("clone", "link")
MAX_LINKS = 100  # a record read back is bounded, whatever wrote it


class InstallError(Exception):
    """What stopped the install, and what to do; said without a traceback."""


def data_dir() -> Path:
    """Where nanomem's venv lives by default: $XDG_DATA_HOME/nanomem or ~/.local/share/nanomem."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "nanomem"


def bin_dir() -> Path:
    return Path.home() / ".local" / "bin"


def read_record(venv: Path) -> dict[str, str] | None:
    """What the install recorded in `venv` (clone, link), or None when `venv` is not ours. The
    file is small and ours; a damaged one reads as not ours rather than as a crash."""
    data = _load_record(venv)
    if data is None or not all(isinstance(data.get(k), str) for k in RECORD_KEYS):
        return None
    return {k: data[k] for k in RECORD_KEYS}


def recorded_links(venv: Path) -> list[Path]:
    """Every link an install into `venv` made, the newest last: an install with another --bin
    keeps the earlier one, which uninstall removes too."""
    data = _load_record(venv) or {}
    earlier = data.get("links")
    found = [*(earlier if isinstance(earlier, list) else []), data.get("link")]
    links = [Path(link) for link in found if isinstance(link, str) and link]
    return list(dict.fromkeys(links))[-MAX_LINKS:]


def _load_record(venv: Path) -> dict[str, Any] | None:
    try:
        with (venv / RECORD).open("rb") as fh:
            data = json.loads(fh.read(64 * 1024))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_our_link(link: Path, venv: Path) -> bool:
    return link.is_symlink() and link.readlink() == venv / "bin" / "nanomem"


def install(clone: Path, venv: Path, bin_folder: Path) -> Path:
    """Install (or reinstall over a venv of ours) and link; the link's path."""
    for needed in ("pyproject.toml", "requirements.lock", "requirements-build.lock", "nanomem"):
        if not (clone / needed).exists():
            raise InstallError(f"{clone} is not a nanomem clone ({needed} is missing)")
    link = bin_folder / "nanomem"
    _check_link_is_free(link, venv)
    if venv.exists() and read_record(venv) is None and (venv.is_file() or any(venv.iterdir())):
        raise InstallError(
            f"{venv} exists and was not made by this installer; remove it, or choose another "
            "place with --venv"
        )
    venv.parent.mkdir(parents=True, exist_ok=True)
    from nanomem.locks import FileLock

    lock = FileLock(venv.parent / LOCK)
    with lock.hold_sync():
        python = venv / "bin" / "python"
        if not python.exists():
            say(f"Creating the virtual environment {venv}")
            import venv as venv_module

            venv_module.EnvBuilder(with_pip=True).create(venv)
        _record(venv, clone, link)  # first: a half-done install is still ours to redo or remove
        say("Installing the locked dependencies (requirements.lock; a minute or two)")
        # --no-deps: the lock holds every dependency, each pinned by hash; pip's resolver has
        # nothing to add, and the one bundled with Python 3.11.7 (23.2) would warn that lxml
        # "does not provide the extra 'html_clean'" (it spells it html-clean; PEP 685).
        _run(python, *PIP, "install", "-q", "--require-hashes", "--no-deps", "-r",
             str(clone / "requirements.lock"))  # fmt: skip
        say("Building and installing nanomem")
        _install_project(python, clone)
        _run(python, *PIP, "check")
        _link(link, venv)
    return link


def _check_link_is_free(link: Path, venv: Path) -> None:
    if (link.is_symlink() or link.exists()) and not is_our_link(link, venv):
        what = f"a link to {link.readlink()}" if link.is_symlink() else "a file"
        raise InstallError(
            f"{link} exists and is not nanomem's link ({what}); move it away, or link "
            "elsewhere with --bin DIR"
        )


def _install_project(python: Path, clone: Path) -> None:
    """nanomem's wheel, built by the build backend of requirements-build.lock (hash-checked,
    put in a temporary folder, never in the venv), then installed over any earlier one."""
    with tempfile.TemporaryDirectory(prefix="nanomem-build-") as scratch:
        backend, wheels = Path(scratch) / "backend", Path(scratch) / "wheels"
        _run(python, *PIP, "install", "-q", "--require-hashes", "--no-deps", "--target",
             str(backend), "-r", str(clone / "requirements-build.lock"))  # fmt: skip
        _run(python, *PIP, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
             str(wheels), str(clone), env={"PYTHONPATH": str(backend)})  # fmt: skip
        (wheel,) = wheels.glob("nanomem-*.whl")
        # Same version number after an update: only --force-reinstall replaces the files.
        _run(python, *PIP, "install", "-q", "--no-deps", "--force-reinstall", str(wheel))


def _record(venv: Path, clone: Path, link: Path) -> None:
    from nanomem.durable import atomic_write_text

    links = [str(p) for p in recorded_links(venv) if p != link] + [str(link)]
    record = {"version": RECORD_VERSION, "clone": str(clone), "link": str(link), "links": links}
    atomic_write_text(venv / RECORD, json.dumps(record, indent=2) + "\n")


def _link(link: Path, venv: Path) -> None:
    """The link, swapped in whole (a link beside it, renamed over)."""
    link.parent.mkdir(parents=True, exist_ok=True)
    _check_link_is_free(link, venv)
    spare = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    spare.unlink(missing_ok=True)
    spare.symlink_to(venv / "bin" / "nanomem")
    spare.replace(link)


def _run(python: Path, *args: str, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(
        [str(python), *args],
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )
    if done.returncode != 0:
        tail = "\n".join(done.stdout.strip().splitlines()[-15:])
        raise InstallError(f"`pip {args[3]}` failed (exit {done.returncode}):\n{tail}")


def path_advice(folder: Path) -> str | None:
    """None when `folder` is on PATH; else the line to add, and to which file."""
    entries = {Path(p).expanduser().resolve() for p in os.environ.get("PATH", "").split(":") if p}
    if folder.resolve() in entries:
        return None
    shown = str(folder).replace(str(Path.home()), "$HOME", 1)
    shell = Path(os.environ.get("SHELL", "")).name
    if shell == "fish":
        rc, line = "~/.config/fish/config.fish", f"fish_add_path {shown}"
    else:
        rc = {"bash": "~/.bashrc", "zsh": "~/.zshrc"}.get(shell, "~/.profile")
        line = f'export PATH="{shown}:$PATH"'
    return (
        f"{folder} is not on your PATH. Add this line to {rc}, then open a new terminal:\n"
        f"    {line}\n"
        f"Until then, run {folder / 'nanomem'}"
    )


def say(text: str) -> None:
    print(text, flush=True)


def main(argv: list[str] | None = None) -> int:
    if sys.version_info < MINIMUM:
        need = ".".join(map(str, MINIMUM))
        print(
            f"nanomem needs Python {need} or newer; {sys.executable} is "
            f"{sys.version.split()[0]}. Install Python {need}+ and run it with that one, "
            f"e.g. python{need} -m nanomem.install",
            file=sys.stderr,
        )
        return 2
    parser = argparse.ArgumentParser(
        prog="python3 -m nanomem.install",
        description="Install nanomem from this clone and put `nanomem` on the PATH.",
    )
    parser.add_argument("--chat", action="store_true", help="start `nanomem chat` afterwards")
    parser.add_argument("--venv", type=Path, help=f"the venv (default {data_dir() / 'venv'})")
    parser.add_argument("--bin", type=Path, help=f"where the link goes (default {bin_dir()})")
    args = parser.parse_args(argv)
    clone = Path(__file__).resolve().parent.parent
    venv = (args.venv or data_dir() / "venv").expanduser().absolute()
    folder = (args.bin or bin_dir()).expanduser().absolute()
    try:
        link = install(clone, venv, folder)
    except InstallError as exc:
        print(f"nanomem install: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nnanomem install: stopped; run it again to finish", file=sys.stderr)
        return 130
    say(f"Installed: {link} -> {venv} (from {clone}).")
    if earlier := [p for p in recorded_links(venv) if p != link and is_our_link(p, venv)]:
        say(f"Kept the earlier link {', '.join(map(str, earlier))} (uninstall removes it too).")
    say("Update: nanomem self update. Uninstall: nanomem self uninstall (keeps ~/.nanomem).")
    advice = path_advice(folder)
    if advice:
        say(advice)
    if args.chat:
        if not sys.stdin.isatty():
            say(f"Not at a terminal: start chatting with `{link} chat`.")
            return 0
        os.execv(str(link), [str(link), "chat"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
