"""The wheel carries templates/ and workspace-template/, and an installed copy finds them."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_carries_the_data_folders_and_works_installed(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(dist),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = dist.glob("nanomem-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for expected in (
        "nanomem/_bundled/templates/system.md.j2",
        "nanomem/_bundled/templates/config.toml.j2",
        "nanomem/_bundled/workspace-template/SOUL.md",
        "nanomem/_bundled/workspace-template/memory/MEMORY.md",
        "nanomem/_bundled/workspace-template/skills/remember/SKILL.md",
        "channels/terminal/channel.py",
        "nanomem/cli/main.py",
    ):
        assert expected in names, expected
    assert not any(name.startswith("tests/") for name in names)

    target = tmp_path / "site"
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr
    home = tmp_path / "home"
    env = {**os.environ, "PYTHONPATH": str(target), "NANOMEM_HOME": str(home)}
    probe = (
        "import nanomem.agent.templates as t; print(t.bundled_dir('templates'));"
        "print(t.bundled_dir('workspace-template'))"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert all(line.startswith(str(target)) for line in found.stdout.splitlines())
    onboard = subprocess.run(
        [sys.executable, "-m", "nanomem", "onboard"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert onboard.returncode == 0, onboard.stderr
    assert (home / "workspace" / "memory" / "MEMORY.md").is_file()


def _bash_blocks(markdown: str, heading: str) -> list[str]:
    section = markdown.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    return [block.split("```", 1)[0].strip() for block in section.split("```bash\n")[1:]]


def test_the_readme_gives_an_install_and_run_command_then_the_test_command_ci_runs() -> None:
    """A new user runs two commands from a fresh clone: the first installs and chats, the
    second installs what the tests need and runs them, exactly as CI does."""
    blocks = _bash_blocks((ROOT / "README.md").read_text(), "## Quick start")
    install_and_run, test = blocks[0], blocks[-1]
    assert install_and_run == "python3 -m nanomem.install --chat"
    installer = (ROOT / "nanomem" / "install.py").read_text()
    assert "--require-hashes" in installer and "requirements.lock" in installer
    assert test == "bash .ci/run"
    ci_run = (ROOT / ".ci" / "run").read_text()
    # The test tools are not in requirements.lock: the test command must install them itself,
    # into the .venv the Quick start made (or a new one on CI's clean clone).
    assert "pytest" not in (ROOT / "requirements.lock").read_text()
    assert "-r requirements-dev.lock" in ci_run and "python3 -m venv .venv" in ci_run
    assert "bash .ci/check" in ci_run
    assert "-m pytest" in (ROOT / ".ci" / "check").read_text()
