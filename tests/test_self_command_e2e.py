"""`nanomem self uninstall` run by the real command from a venv the installer's own record and
link functions made (a venv of its own that reaches this checkout's packages, so no registry
is needed): it refuses while a gateway runs on the home, and removes every link an install
with another --bin made."""

from __future__ import annotations

import os
import site
import subprocess
import venv as venv_module
from pathlib import Path

from nanomem.home import Home
from nanomem.install import _link, _record, read_record
from tests.conftest import cli_env
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.gateway import GatewayProcess

ROOT = Path(__file__).resolve().parent.parent


def installed(tmp_path: Path) -> Path:
    """A venv as `python3 -m nanomem.install` leaves it, its packages this checkout's."""
    venv = tmp_path / "share" / "nanomem" / "venv"
    venv_module.EnvBuilder(with_pip=False).create(venv)
    (packages,) = (venv / "lib").glob("python3*/site-packages")
    ours = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (packages / "checkout.pth").write_text(
        "".join(f"import site; site.addsitedir({p!r})\n" for p in ours)
    )
    command = venv / "bin" / "nanomem"
    command.write_text(f"#!{venv / 'bin' / 'python'}\nfrom nanomem.cli.main import main\nmain()\n")
    command.chmod(0o700)
    return venv


def self_command(venv: Path, home: Home, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "python"), "-m", "nanomem", "self", *args],
        env=cli_env(home),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def installed_twice(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(venv, first link, second link): `python3 -m nanomem.install`, then again with --bin."""
    venv = installed(tmp_path)
    first, second = tmp_path / "bin" / "nanomem", tmp_path / "other-bin" / "nanomem"
    for link in (first, second):
        _record(venv, ROOT, link)
        _link(link, venv)
    return venv, first, second


def test_uninstall_refuses_while_a_gateway_runs_on_the_home(home: Home, tmp_path: Path) -> None:
    venv, first, second = installed_twice(tmp_path)
    with FakeOpenAI() as llm, GatewayProcess(home, None, llm) as gateway:
        refused = self_command(venv, home, "uninstall")
        pid = gateway.proc.pid
        assert refused.returncode == 1, refused.stdout + refused.stderr
        said = refused.stderr
        assert f"a gateway runs on {home.root} (pid {pid}, port {gateway.port})" in said
        assert f"`kill -TERM {pid}`" in said and "`systemctl --user stop nanomem`" in said
        assert "Nothing was removed" in said and "Traceback" not in said
        assert refused.stdout == ""
        assert venv.is_dir() and first.is_symlink() and second.is_symlink()
        assert gateway.health()[0] == 200  # it still has its program
    done = self_command(venv, home, "uninstall")  # once it is stopped
    assert done.returncode == 0, done.stdout + done.stderr
    assert not venv.exists() and home.config.is_file()  # the home stays


def test_uninstall_removes_the_link_of_every_install(home: Home, tmp_path: Path) -> None:
    venv, first, second = installed_twice(tmp_path)
    assert read_record(venv) == {"clone": str(ROOT), "link": str(second)}  # what update uses
    done = self_command(venv, home, "uninstall")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"removed {first}\nremoved {second}\nremoved {venv}\n" in done.stdout
    assert not os.path.lexists(first) and not os.path.lexists(second)  # none left dangling
    assert not venv.exists() and home.config.is_file()
