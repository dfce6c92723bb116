"""`python3 -m nanomem.install` from a clone, as a person runs it with a new HOME: the venv from
the hash-locked lock, `nanomem` on the PATH through ~/.local/bin, `nanomem self update` (git
pull, then the same install again) and `nanomem self uninstall`, which leaves only the home.

Like tests/test_docker.py, the install takes its locked packages from the registry pip is set
up with on this machine; the person's HOME is new, the machine's pip configuration is not."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from tests.conftest import NANOMEM
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parent.parent
# The project's own files; what a checkout accumulates (venvs, caches) is no part of a clone.
NOT_IN_A_CLONE = (".git", ".venv", "venv", "__pycache__", ".mypy_cache", ".pytest_cache",
                  ".ruff_cache", "build", "dist")  # fmt: skip
GIT_PERSON = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}


def person_env(home: Path) -> dict[str, str]:
    """A new person's environment: their own HOME, nothing of nanomem's or of this test's venv
    (neither its `nanomem` on PATH nor its packages), a bash login."""
    ours = str(Path(sys.executable).parent)
    leaks = ("NANOMEM_", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "XDG_DATA_HOME")
    env = {k: v for k, v in os.environ.items() if not k.startswith(leaks)}
    env["PATH"] = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != ours)
    # pip as this machine sets it up (its registry and its cache), as the person's pip would be.
    env.setdefault("XDG_CONFIG_HOME", str(Path.home() / ".config"))
    env.setdefault("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip"))
    return env | {"HOME": str(home), "SHELL": "/bin/bash", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def run(command: list[str], env: dict[str, str], cwd: Path, timeout: float = 900) -> str:
    done = subprocess.run(
        command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{command} exit {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def failing(command: list[str], env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 1, f"{command} exit {done.returncode}:\n{done.stdout}{done.stderr}"
    assert "Traceback" not in done.stderr
    return done.stdout + done.stderr


def a_clone(tmp_path: Path) -> tuple[Path, Path]:
    """(origin, clone): this checkout's files as one commit, and a git clone of it."""
    origin, clone = tmp_path / "origin", tmp_path / "clone"
    shutil.copytree(ROOT, origin, ignore=shutil.ignore_patterns(*NOT_IN_A_CLONE))
    env = {**os.environ, **GIT_PERSON}
    for command in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "the clone"]):
        run(["git", "-C", str(origin), *command], env, tmp_path)
    run(["git", "clone", "-q", str(origin), str(clone)], env, tmp_path)
    return origin, clone


def read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def system_python(env: dict[str, str]) -> str:
    return shutil.which("python3", path=env["PATH"]) or sys.executable


@pytest.mark.timeout(1800)
def test_install_update_and_uninstall_leave_nanomem_on_the_path_then_only_the_home(
    tmp_path: Path,
) -> None:
    origin, clone = a_clone(tmp_path)
    home = tmp_path / "person"
    home.mkdir()
    env = person_env(home)
    said = run([system_python(env), "-m", "nanomem.install"], env, clone)
    bin_folder = home / ".local" / "bin"
    venv = home / ".local" / "share" / "nanomem" / "venv"
    link = bin_folder / "nanomem"
    assert link.is_symlink() and link.readlink() == venv / "bin" / "nanomem"
    assert f"{bin_folder} is not on your PATH. Add this line to ~/.bashrc" in said
    assert 'export PATH="$HOME/.local/bin:$PATH"' in said
    assert "html_clean" not in said and "WARNING" not in said.replace("WARNING: Location", "")
    assert not (clone / ".venv").exists()  # the clone stays as it was: CI's .venv is its own

    # The line the installer gave, as the new terminal would have it.
    env["PATH"] = f"{bin_folder}{os.pathsep}{env['PATH']}"
    assert shutil.which("nanomem", path=env["PATH"]) == str(link)
    assert run(["nanomem", "--version"], env, tmp_path).strip() == "nanomem 0.1.0"
    run(["nanomem", "onboard", "--model", "openai/gpt-4o-mini"], env, tmp_path)
    assert (home / ".nanomem" / "config.toml").is_file()
    probe = "import nanomem; print(nanomem.__file__)"
    assert str(venv) in run([str(venv / "bin" / "python"), "-c", probe], env, tmp_path)

    # Install and run, as README's first command: again over the same venv, then the chat.
    chat = pexpect.spawn(
        system_python(env), ["-m", "nanomem.install", "--chat"], cwd=str(clone),
        env=env | {"TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"}, encoding="utf-8", timeout=600,
    )  # fmt: skip
    chat.expect_exact(f"Installed: {link}")
    chat.expect_exact("you ›")
    chat.sendcontrol("d")
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 0

    # Update: refused while the clone has local changes, then a pull and a reinstall.
    readme = clone / "README.md"
    readme.write_text(readme.read_text() + "\nmy own note\n")
    said = failing(["nanomem", "self", "update"], env, tmp_path)
    assert "has local changes" in said and "Nothing was changed" in said
    run(["git", "-C", str(clone), "checkout", "README.md"], env, tmp_path)
    pyproject = origin / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('version = "0.1.0"', 'version = "0.1.1"'))
    run(["git", "-C", str(origin), "commit", "-qam", "0.1.1"], {**env, **GIT_PERSON}, tmp_path)
    # With a gateway on the home: updated, and told it runs the old code until restarted.
    serving = {"NANOMEM_GATEWAY__PORT": "0", "NANOMEM_DREAM__ENABLED": "false",
               "OPENAI_API_KEY": "sk-not-used-0123456789"}  # fmt: skip
    gateway = subprocess.Popen(["nanomem", "gateway"], env=env | serving, cwd=tmp_path,
                               stderr=subprocess.DEVNULL)  # fmt: skip
    announced = home / ".nanomem" / "gateway.json"
    try:
        wait_until(lambda: '"port": 0' not in (read(announced) or '"port": 0'), timeout=120)
        said = run(["nanomem", "self", "update"], env, tmp_path)
        assert "Installed:" in said and "html_clean" not in said
        assert f"a gateway runs on this home (pid {gateway.pid}, port" in said
        assert "restart it to use the update" in said and f"kill -TERM {gateway.pid}" in said
    finally:
        gateway.terminate()
        assert gateway.wait(60) == 0
    assert run(["nanomem", "--version"], env, tmp_path).strip() == "nanomem 0.1.1"

    said = failing(["nanomem", "self", "uninstall", "--purge"], env, tmp_path)  # no terminal
    assert "asks first: run it at a terminal" in said and link.is_symlink() and venv.is_dir()
    purge = pexpect.spawn("nanomem", ["self", "uninstall", "--purge"], env=env, encoding="utf-8")
    purge.expect_exact("Type 'delete' to confirm:")
    purge.sendline("yes")  # anything but the word keeps everything
    purge.expect(pexpect.EOF)
    purge.close()
    assert purge.exitstatus == 1 and "nothing was deleted or removed" in (purge.before or "")
    assert link.is_symlink() and venv.is_dir() and (home / ".nanomem" / "config.toml").is_file()
    said = run(["nanomem", "self", "uninstall"], env, tmp_path)
    assert f"Your home {home / '.nanomem'}" in said and "is kept" in said
    assert not link.exists() and not link.is_symlink() and not venv.exists()
    assert shutil.which("nanomem", path=env["PATH"]) is None
    assert not (home / ".local" / "share" / "nanomem").exists()
    # (Tools pip runs may leave their own dot folders: rustc's shim writes ~/.rustup.)
    left = [p.relative_to(home) for p in home.rglob("*") if not p.is_dir()]
    assert not [p for p in left if p.parts[0] == ".local"], left
    assert (home / ".nanomem" / "config.toml").is_file()


def test_the_installer_never_replaces_a_nanomem_that_is_not_its_link(tmp_path: Path) -> None:
    home = tmp_path / "person"
    theirs = home / ".local" / "bin" / "nanomem"
    theirs.parent.mkdir(parents=True)
    theirs.write_text("#!/bin/sh\necho mine\n")
    env = person_env(home)
    said = failing([system_python(env), "-m", "nanomem.install"], env, ROOT)
    assert f"{theirs} exists and is not nanomem's link (a file)" in said and "--bin DIR" in said
    assert theirs.read_text() == "#!/bin/sh\necho mine\n"
    assert not (home / ".local" / "share" / "nanomem" / "venv").exists()  # refused before


def test_self_refuses_a_nanomem_the_installer_did_not_install(tmp_path: Path) -> None:
    env = person_env(tmp_path)
    for action in ("update", "uninstall"):
        said = failing([*NANOMEM, "self", action], env, tmp_path)
        assert "was not installed by `python3 -m nanomem.install`" in said
    assert Path(sys.prefix).is_dir()
