"""Structural rules: the import direction, who may import the heavy libraries, module sizes."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORE = sorted((ROOT / "nanomem").rglob("*.py"))
CHANNELS = sorted((ROOT / "channels").rglob("*.py"))


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def importers_of(package: str, files: list[Path]) -> set[str]:
    return {
        str(path.relative_to(ROOT))
        for path in files
        if any(name == package or name.startswith(package + ".") for name in imported_modules(path))
    }


def test_core_never_imports_channels() -> None:
    assert importers_of("channels", CORE) == set()


@pytest.mark.parametrize(
    ("package", "allowed"),
    [
        ("litellm", {"nanomem/litellm_provider.py"}),
        ("telegram", {"channels/telegram.py"}),
        ("dulwich", {"nanomem/gitstore.py"}),
    ],
)
def test_heavy_libraries_have_one_importer(package: str, allowed: set[str]) -> None:
    assert importers_of(package, CORE + CHANNELS) <= allowed


def test_modules_stay_small() -> None:
    # A smell alarm, not a target: a module is split when that serves its reader.
    too_big = {
        str(p.relative_to(ROOT)): n
        for p in CORE + CHANNELS
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600
    }
    assert too_big == {}


def test_importing_the_core_has_no_side_effects(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys, nanomem.app, nanomem.cli;"
        "assert 'litellm' not in sys.modules, 'litellm imported eagerly';"
        "assert 'channels' not in sys.modules"
    )
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert list(tmp_path.iterdir()) == []  # no folder or file was created on import


def test_the_chat_prompt_waits_for_nothing_it_does_not_need() -> None:
    """What `nanomem chat` imports before its prompt shows; the rest loads behind it."""
    import subprocess
    import sys

    before_prompt = (
        "nanomem.cli, nanomem.config, nanomem.onboard, nanomem.channel, channels.terminal"
    )
    behind = [
        "nanomem.app",
        "nanomem.loop",
        "loguru",
        "litellm",
        "dulwich",
        "apscheduler",
        "jinja2",
    ]
    code = f"import sys, {before_prompt}; print(sorted(set({behind!r}) & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
