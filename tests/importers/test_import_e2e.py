"""`nanomem import` in its own process against sources laid out as each project keeps its own:
the dry run leaves the home byte-identical, --apply makes one memory version, the next chat's
prompt (as the loopback model received it) holds the imported memory, and `nanomem memory
restore` takes the import away again."""

from pathlib import Path

import pytest

from nanomem.home import Home
from nanomem.memory import GitStore
from tests.conftest import cli_env, run_cli
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.imports import PROJECTS, REMEMBERED, snapshot, source


def versions(home: Home) -> list[str]:
    return [v.summary for v in GitStore(home.memory_git, home.workspace).log(limit=50)]


def system_prompt(fake_llm: FakeOpenAI) -> str:
    content = fake_llm.requests[-1]["messages"][0]["content"]
    return content if isinstance(content, str) else str(content)


@pytest.mark.parametrize("project", PROJECTS)
def test_dry_run_apply_chat_and_restore(
    project: str, home: Home, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    path = source(tmp_path, project)
    env = cli_env(home, fake_llm)
    before = snapshot(home.root)
    our_skills = sorted(p.name for p in (home.workspace / "skills").iterdir())

    dry = run_cli("import", project, str(path), env=env)
    assert dry.returncode == 0, dry.stderr
    assert "Dry run: nothing was changed" in dry.stdout
    assert snapshot(home.root) == before

    applied = run_cli("import", project, str(path), "--apply", env=env)
    assert applied.returncode == 0, applied.stderr
    made = versions(home)
    assert made[0].startswith(f"import from {project}: ")
    assert len(made) == 2 and made[1].startswith("initial memory")
    sha = GitStore(home.memory_git, home.workspace).log(limit=1)[0].short
    assert len(list((home.workspace / "skills").iterdir())) > len(our_skills)
    assert f"nanomem memory restore {sha}" in applied.stdout

    fake_llm.reply("Noted.")
    chat = run_cli("chat", "-m", "what do you know about me?", env=env)
    assert chat.returncode == 0, chat.stderr
    assert REMEMBERED[project] in system_prompt(fake_llm)

    restored = run_cli("memory", "restore", sha, env=env)
    assert restored.returncode == 0, restored.stderr
    assert "Removed the skills it imported" in restored.stdout
    assert sorted(p.name for p in (home.workspace / "skills").iterdir()) == our_skills
    assert '"schedules": []' in home.schedules.read_text()
    fake_llm.reply("Noted.")
    assert run_cli("chat", "-m", "and now?", env=env).returncode == 0
    assert REMEMBERED[project] not in system_prompt(fake_llm)


def test_a_second_run_imports_nothing_twice(home: Home, tmp_path: Path) -> None:
    path = source(tmp_path, "nanobot")
    env = cli_env(home)
    assert run_cli("import", "nanobot", str(path), "--apply", env=env).returncode == 0
    after_first = snapshot(home.root)
    again = run_cli("import", "nanobot", str(path), "--apply", env=env)
    assert again.returncode == 0, again.stderr
    assert "Nothing new to import." in again.stdout
    assert snapshot(home.root) == after_first


def test_undoing_an_import_removes_nothing_through_a_linked_skills_folder(
    home: Home, tmp_path: Path
) -> None:
    """The agent's shell can swap workspace/skills for a link; undoing the import then must
    not delete folders of the same names wherever the link points."""
    env = cli_env(home)
    applied = run_cli("import", "nanobot", str(source(tmp_path, "nanobot")), "--apply", env=env)
    assert applied.returncode == 0, applied.stderr
    sha = GitStore(home.memory_git, home.workspace).log(limit=1)[0].short
    skills = home.workspace / "skills"
    elsewhere = tmp_path / "elsewhere"
    skills.rename(elsewhere)
    skills.symlink_to(elsewhere)
    before = sorted(p.name for p in elsewhere.iterdir())
    restored = run_cli("memory", "restore", sha, env=env)
    assert restored.returncode == 0, restored.stderr
    assert sorted(p.name for p in elsewhere.iterdir()) == before
    assert "Removed the skills it imported" not in restored.stdout
