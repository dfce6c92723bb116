"""Told once, known later: the real CLI (in this process), the model over HTTP, dulwich on disk,
read by real git."""

import shutil
import subprocess

from nanomem.features.dream.dream import NOTHING_NEW
from nanomem.home import Home
from tests.conftest import cli_env, run_cli_here
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.dream import script_a_dream


def test_told_once_known_later_and_undone(home: Home, fake_llm: FakeOpenAI) -> None:
    env = cli_env(home, fake_llm)
    fake_llm.reply("Nice to meet you, Ada!")
    assert run_cli_here("chat", "-m", "I'm Ada and I love green tea", env=env).returncode == 0
    fake_llm.reply("- 2026-11-22: the user is Ada and loves green tea")
    archived = run_cli_here("chat", "-m", "/new", env=env)
    assert "Archived 2 messages" in archived.stdout

    script_a_dream(fake_llm)
    dreamed = run_cli_here("dream", env=env)
    assert dreamed.returncode == 0, dreamed.stderr
    assert dreamed.stdout.splitlines()[0].startswith("Learned from 1 history entry (")
    assert dreamed.stderr.splitlines() == [  # not a terminal: one line per phase
        "dream: reading 1 history entry",
        "dream: analysing",
        "dream: editing USER.md",
        "dream: committing",
    ]
    assert "- USER.md: +4 -1" in dreamed.stdout
    analysis_request = fake_llm.requests[-3]
    assert "the user is Ada and loves green tea" in analysis_request["messages"][-1]["content"]
    edit_tools = {t["function"]["name"] for t in fake_llm.requests[-2]["tools"]}
    assert edit_tools == {"read_memory", "edit_memory", "append_memory"}

    fake_llm.reply("You are Ada.")
    fresh = run_cli_here("chat", "-m", "who am I?", "--session", "elsewhere", env=env)
    assert fresh.stdout.strip() == "You are Ada."
    assert "- Name: Ada" in fake_llm.requests[-1]["messages"][0]["content"]

    log = run_cli_here("memory", "log", env=env)
    assert log.returncode == 0
    assert "dream: USER.md +4 -1" in log.stdout and "+- Name: Ada" in log.stdout
    assert "`" not in log.stdout  # plain text in the shell: no Markdown ids or fences
    sha = log.stdout.split()[0]

    undone = run_cli_here("memory", "restore", sha, env=env)
    assert undone.returncode == 0 and undone.stdout.startswith("Restored USER.md")
    assert "Ada" not in (home.workspace / "USER.md").read_text()
    listing = run_cli_here("memory", "restore", env=env).stdout
    restore_sha = listing.splitlines()[1].split()[0]
    assert f"nanomem memory restore {restore_sha} undoes this restore" in undone.stdout
    assert f"restore {sha}" in listing.splitlines()[1]
    assert listing.splitlines()[-1] == "nanomem memory restore <id> undoes one."
    assert "`" not in listing and "/dream-restore" not in listing + undone.stdout
    redone = run_cli_here("memory", "restore", restore_sha, env=env)
    assert redone.returncode == 0 and "- Name: Ada" in (home.workspace / "USER.md").read_text()

    git = shutil.which("git")
    if git:
        git_dir = f"--git-dir={home.memory_git}"
        subjects = subprocess.run(
            [git, git_dir, "log", "--format=%s"], capture_output=True, text=True, check=True
        ).stdout.splitlines()
        assert subjects[0].startswith("restore ") and subjects[2].startswith("dream: USER.md")
        assert subjects[-1].startswith("initial memory")
        fsck = subprocess.run([git, git_dir, "fsck", "--strict"], capture_output=True, text=True)
        assert fsck.returncode == 0, fsck.stderr


def test_dream_in_the_chat_and_bad_ids_in_the_shell(home: Home, fake_llm: FakeOpenAI) -> None:
    env = cli_env(home, fake_llm)
    nothing = run_cli_here("chat", "-m", "/dream", env=env)
    assert nothing.stdout.strip() == NOTHING_NEW
    unknown = run_cli_here("memory", "log", "deadbeef", env=env)
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == "nanomem: no memory version starts with deadbeef"
    bad = run_cli_here("memory", "restore", "xyz!", env=env)
    assert bad.returncode == 1 and "not a version id" in bad.stderr
    assert len(run_cli_here("memory", "restore", env=env).stdout.splitlines()) == 4  # initial only
