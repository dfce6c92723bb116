"""What each project's folder becomes in a home: `nanomem import` run in this process on the
fixtures (tests/fixtures/import/), and the readers' findings themselves."""

import json
import os
from pathlib import Path

from nanomem.agent.skills import Skills
from nanomem.config import ScheduleSettings
from nanomem.features.schedules import ScheduleStore
from nanomem.home import Home
from nanomem.importers import reader
from nanomem.importers.found import Found
from nanomem.importers.source import SourceTree
from nanomem.memory import HistoryStore, NewEntry
from tests.conftest import cli_env, run_cli_here
from tests.helpers.imports import source


def found(tmp_path: Path, project: str) -> Found:
    _, read = reader(project)
    return read(SourceTree.open(source(tmp_path, project)))


def imported_history(home: Home) -> list[dict]:
    lines = (home.workspace / "memory" / "history.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e.get("imported")]


def test_nanobot_memory_history_skills_and_jobs(tmp_path: Path) -> None:
    result = found(tmp_path, "nanobot")
    assert [(m.target, m.source) for m in result.memory] == [
        ("SOUL.md", "workspace/SOUL.md"),
        ("USER.md", "workspace/USER.md"),
        ("memory/MEMORY.md", "workspace/memory/MEMORY.md"),
    ]
    assert sorted(s.name for s in result.skills) == ["remember", "weather"]
    assert [h.timestamp[:16] for h in result.history] == [
        "2026-10-02T09:14",
        "2026-10-03T18:40",
        "2026-11-20T07:05",
    ]
    assert [(j.cron, j.every_minutes, j.timezone) for j in result.jobs] == [
        ("0 8 * * 1-5", None, "Europe/Berlin"),
        (None, 90, ""),
    ]
    assert any("switched off" in s.reason for s in result.skipped)  # the disabled one-shot


def test_openclaw_identity_daily_notes_and_a_command_job(tmp_path: Path) -> None:
    result = found(tmp_path, "openclaw")
    assert [m.source for m in result.memory if m.target == "SOUL.md"] == [
        "workspace/SOUL.md",
        "workspace/IDENTITY.md",
    ]
    assert [h.timestamp[:10] for h in result.history] == ["2026-11-25", "2026-11-26"]
    assert "Planted garlic in bed 2." in result.history[0].content
    assert sorted(s.name for s in result.skills) == ["garden", "pdf-tools"]  # and managed ones
    assert [j.text for j in result.jobs] == [
        "Summarize overnight updates for Ada.",
        "Reminder: water the seedlings.",
    ]
    refused = {s.source: s.reason for s in result.skipped}
    assert "not a message to the agent" in refused["cron/jobs.json 'Nightly cleanup'"]


def test_hermes_entries_bundled_skills_scripts_and_sessions(tmp_path: Path) -> None:
    result = found(tmp_path, "hermes")
    memory = {m.target: m.text for m in result.memory}
    assert "§" not in memory["memory/MEMORY.md"]
    assert memory["memory/MEMORY.md"].split("\n\n")[-1] == "Ada prefers metric units."
    assert [s.name for s in result.skills] == ["standup"]  # arxiv ships with Hermes
    assert [(j.every_minutes, j.text[:10]) for j in result.jobs] == [(1440, "Check the ")]
    # The terminal's session alone: a Telegram session may have been a group's.
    assert [(h.kind, h.content) for h in result.history] == [
        ("raw", "user: Remind me: oven service Monday.")
    ]
    assert result.history[0].timestamp == "2025-11-21T17:30:00+00:00"
    refused = {s.source: s.reason for s in result.skipped}
    assert refused["state.db"].startswith("1 session of telegram not imported")


def test_applied_history_keeps_its_times_and_is_marked(home: Home, tmp_path: Path) -> None:
    path = source(tmp_path, "nanobot")
    result = run_cli_here("import", "nanobot", str(path), "--apply", env=cli_env(home))
    assert result.returncode == 0, result.stderr
    entries = imported_history(home)
    assert [e["timestamp"][:16] for e in entries] == [
        "2026-10-02T09:14",
        "2026-10-03T18:40",
        "2026-11-20T07:05",
    ]
    assert {e["imported"] for e in entries} == {"nanobot"}
    assert {e["session"] for e in entries} == {"import:nanobot"}


def test_applied_memory_keeps_what_the_home_had(home: Home, tmp_path: Path) -> None:
    ours = {rel: (home.workspace / rel).read_text() for rel in ("SOUL.md", "USER.md")}
    path = source(tmp_path, "openclaw")
    assert (
        run_cli_here("import", "openclaw", str(path), "--apply", env=cli_env(home)).returncode == 0
    )
    soul = (home.workspace / "SOUL.md").read_text()
    assert soul.startswith(ours["SOUL.md"].rstrip())
    assert "## Imported from openclaw: workspace/IDENTITY.md\n\n# IDENTITY.md\n" in soul
    assert (home.workspace / "USER.md").read_text().startswith(ours["USER.md"].rstrip())
    memory = (home.workspace / "memory" / "MEMORY.md").read_text()
    assert memory.rstrip().endswith(
        "moved in from openclaw (2 skills, 2 schedules, 2 history entries)."
    )


def test_a_skill_by_one_of_our_names_is_renamed_not_overwritten(home: Home, tmp_path: Path) -> None:
    ours = (home.workspace / "skills" / "remember" / "SKILL.md").read_bytes()
    path = source(tmp_path, "nanobot")
    result = run_cli_here("import", "nanobot", str(path), "--apply", env=cli_env(home))
    assert "skills/remember-nanobot (renamed: the home has a skill remember)" in result.stdout
    assert (home.workspace / "skills" / "remember" / "SKILL.md").read_bytes() == ours
    names = sorted(s.name for s in Skills(home.workspace / "skills").all())
    assert names == ["remember", "remember-nanobot", "weather"]


def test_schedules_are_armed_in_the_chat_named(home: Home, tmp_path: Path) -> None:
    path = source(tmp_path, "hermes")
    env = cli_env(home)
    result = run_cli_here(
        "import", "hermes", str(path), "--apply", "--chat", "telegram:4242", env=env
    )
    assert result.returncode == 0, result.stderr
    stored = ScheduleStore.of(home, ScheduleSettings()).read()
    assert stored.rejected == []
    assert [(s.session, s.every_minutes, s.text) for s in stored.schedules] == [
        ("telegram:4242", 1440, "Check the flour stock list and tell Ada what to reorder.")
    ]


def test_bad_arguments_are_said_and_change_nothing(home: Home, tmp_path: Path) -> None:
    env = cli_env(home)
    missing = run_cli_here("import", "hermes", str(tmp_path / "nowhere"), env=env)
    assert missing.returncode == 2
    assert "does not exist" in missing.stderr and "Traceback" not in missing.stderr
    path = source(tmp_path, "nanobot")
    chat = run_cli_here("import", "nanobot", str(path), "--apply", "--chat", "nochat", env=env)
    assert chat.returncode == 2 and "is not channel:chat" in chat.stderr
    assert not (home.root / "schedules.json").exists()
    default = run_cli_here("import", "openclaw", env=env | {"HOME": str(tmp_path)})
    assert default.returncode == 2
    assert f"{tmp_path}/.openclaw does not exist; give the folder" in default.stderr


def test_a_long_text_is_kept_as_a_file_the_memory_points_to(home: Home, tmp_path: Path) -> None:
    path = source(tmp_path, "nanobot")
    long = "".join(f"- {n}: the allotment diary, day {n}\n" for n in range(1500))  # ~50,000 chars
    (path / "workspace" / "memory" / "MEMORY.md").write_text(long)
    env = cli_env(home)
    result = run_cli_here("import", "nanobot", str(path), "--apply", env=env)
    assert result.returncode == 0, result.stderr
    kept = home.workspace / "imported" / "nanobot" / "workspace" / "memory" / "MEMORY.md"
    assert kept.read_text() == long
    memory = (home.workspace / "memory" / "MEMORY.md").read_text()
    assert "is in the workspace at imported/nanobot/workspace/memory/MEMORY.md" in memory
    assert "day 1499" not in memory
    sha = result.stdout.split("Saved as memory version ")[1][:8]
    restored = run_cli_here("memory", "restore", sha, env=env)
    assert "Removed the files it kept in the workspace" in restored.stdout, restored.stderr
    assert not (home.workspace / "imported").exists()


def test_undoing_keeps_a_skill_changed_since(home: Home, tmp_path: Path) -> None:
    path = source(tmp_path, "openclaw")
    env = cli_env(home)
    result = run_cli_here("import", "openclaw", str(path), "--apply", env=env)
    sha = result.stdout.split("Saved as memory version ")[1][:8]
    edited = home.workspace / "skills" / "garden" / "SKILL.md"
    edited.write_text(edited.read_text() + "\nAlso note the weather.\n")
    later = edited.stat().st_mtime + 60
    os.utime(edited, (later, later))
    restored = run_cli_here("memory", "restore", sha, env=env)
    assert "Removed the skills it imported: pdf-tools." in restored.stdout, restored.stderr
    assert "Kept the imported skills changed since: garden." in restored.stdout
    assert edited.read_text().endswith("Also note the weather.\n")


def test_dream_is_spared_the_imported_history(home: Home, tmp_path: Path) -> None:
    path = source(tmp_path, "nanobot")
    result = run_cli_here("import", "nanobot", str(path), "--apply", env=cli_env(home))
    assert "Dream will not read the imported history again" in result.stdout
    history = HistoryStore(home.workspace / "memory", home.lock("history"))
    assert history.dream_cursor() == history.last_cursor() == 3


def test_dream_still_reads_our_own_waiting_history(home: Home, tmp_path: Path) -> None:
    history = HistoryStore(home.workspace / "memory", home.lock("history"))
    history.append_sync([NewEntry("cli:direct", "- Ada's bike is blue", "summary")])
    path = source(tmp_path, "nanobot")
    result = run_cli_here("import", "nanobot", str(path), "--apply", env=cli_env(home))
    assert "Dream will read the imported history with the other new history" in result.stdout
    assert history.dream_cursor() == 0
