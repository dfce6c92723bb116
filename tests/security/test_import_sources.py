"""Another agent's folder is untrusted input to `nanomem import`: links out of it, huge files,
broken JSON, a state.db that is not one, jobs that run commands, names with `..` and control
characters each end as a skipped item with its reason or as plain text, never as a traceback,
a file read from outside PATH, a command run, or half an import."""

import json
import os
import re
import subprocess
from pathlib import Path

from nanomem.home import Home
from tests.conftest import TEST_KEY, cli_env, run_cli_here
from tests.helpers.imports import snapshot, source

SECRET = "the-password-is-swordfish"


def everything_in(home: Home) -> str:
    texts = [p.read_bytes().decode("utf-8", "replace") for p in home.root.rglob("*") if p.is_file()]
    return "\n".join(texts)


def apply(
    home: Home, project: str, path: Path, *extra: str, **env: str
) -> subprocess.CompletedProcess[str]:
    result = run_cli_here("import", project, str(path), "--apply", *extra, env=cli_env(home, **env))
    assert "Traceback" not in result.stderr + result.stdout
    return result


def test_links_out_of_the_source_are_not_followed(home: Home, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "evil").mkdir(parents=True)
    (outside / "secret.md").write_text(SECRET)
    (outside / "evil" / "SKILL.md").write_text(f"---\nname: evil\n---\n{SECRET}")
    path = source(tmp_path, "nanobot")
    ws = path / "workspace"
    (ws / "USER.md").unlink()
    (ws / "USER.md").symlink_to(outside / "secret.md")
    (ws / "skills" / "evil").symlink_to(outside / "evil")
    (ws / "skills" / "weather" / "notes.md").symlink_to(outside / "secret.md")
    result = apply(home, "nanobot", path)
    assert result.returncode == 0, result.stderr
    assert (
        "workspace/USER.md: a link (or cannot be opened); links are not followed" in result.stdout
    )
    assert SECRET not in everything_in(home)
    assert not (home.workspace / "skills" / "evil").exists()
    assert (home.workspace / "skills" / "weather" / "SKILL.md").is_file()  # the rest came


def test_a_source_folder_that_is_a_link_is_not_entered(home: Home, tmp_path: Path) -> None:
    outside = tmp_path / "outside-memory"
    outside.mkdir()
    (outside / "2026-01-01.md").write_text(SECRET)
    path = source(tmp_path, "openclaw")
    memory = path / "workspace" / "memory"
    for note in memory.iterdir():
        note.unlink()
    memory.rmdir()
    memory.symlink_to(outside)
    result = apply(home, "openclaw", path)
    assert result.returncode == 0, result.stderr
    assert "workspace/memory: not a folder of its own (a link?)" in result.stdout
    assert SECRET not in everything_in(home)


def test_a_huge_file_is_skipped_and_the_rest_imported(home: Home, tmp_path: Path) -> None:
    path = source(tmp_path, "openclaw")
    (path / "workspace" / "MEMORY.md").write_text("- filler line\n" * 40_000)  # ~560 KiB
    result = apply(home, "openclaw", path)
    assert result.returncode == 0, result.stderr
    assert "workspace/MEMORY.md: over 256 KiB; not imported" in result.stdout
    assert "filler line" not in (home.workspace / "memory" / "MEMORY.md").read_text()
    assert "Pebble" in (home.workspace / "SOUL.md").read_text()


def test_malformed_and_deeply_nested_json_are_skipped(home: Home, tmp_path: Path) -> None:
    path = source(tmp_path, "nanobot")
    (path / "workspace" / "cron" / "jobs.json").write_text('{"version": 1, "jobs": [')
    history = path / "workspace" / "memory" / "history.jsonl"
    history.write_text("[" * 100_000 + "\n" + history.read_text())
    result = apply(home, "nanobot", path)
    assert result.returncode == 0, result.stderr
    assert "workspace/cron/jobs.json: not valid JSON" in result.stdout
    assert "1 lines without a time and text" in result.stdout
    assert not home.schedules.exists()  # no job was read
    assert "Bell Rock" in (home.workspace / "memory" / "history.jsonl").read_text()


def test_a_state_db_that_is_not_sqlite_or_not_hermes(home: Home, tmp_path: Path) -> None:
    path = source(tmp_path, "hermes")
    (path / "state.db").write_bytes(b"\x00not a database" * 1000)
    result = apply(home, "hermes", path)
    assert result.returncode == 0, result.stderr
    assert "state.db: not a SQLite database; no session imported" in result.stdout
    import sqlite3

    other = tmp_path / "source-hermes-2"
    other.mkdir()
    db = sqlite3.connect(other / "state.db")
    db.execute("CREATE TABLE notes (body TEXT)")
    db.commit()
    db.close()
    before = (other / "state.db").read_bytes()
    result = run_cli_here("import", "hermes", str(other), env=cli_env(home))
    assert result.returncode == 0, result.stderr
    assert "state.db: not readable as Hermes' sessions (no such table: sessions)" in result.stdout
    assert sorted(os.listdir(other)) == ["state.db"]  # read-only: no journal, no -wal, no -shm
    assert (other / "state.db").read_bytes() == before


def test_a_job_that_runs_a_command_stays_data(home: Home, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = source(tmp_path, "openclaw")
    jobs_file = path / "cron" / "jobs.json"
    jobs = json.loads(jobs_file.read_text())
    jobs["jobs"][2]["payload"]["command"] = f"touch {marker}"
    jobs["jobs"][1]["payload"]["text"] = f"$(touch {marker}); `touch {marker}`"
    jobs_file.write_text(json.dumps(jobs))
    result = apply(home, "openclaw", path)
    assert result.returncode == 0, result.stderr
    assert "'Nightly cleanup': runs a 'command' job, not a message to the agent" in result.stdout
    texts = [s["text"] for s in json.loads(home.schedules.read_text())["schedules"]]
    assert f"$(touch {marker}); `touch {marker}`" in texts  # a message, word for word
    assert all("Nightly" not in t and "rm -rf" not in t for t in texts)
    assert not marker.exists()


def test_names_with_dots_and_control_characters(home: Home, tmp_path: Path) -> None:
    path = source(tmp_path, "hermes")
    for folder in ("...", "my skill", "a..b"):
        (path / "skills" / folder).mkdir()
        (path / "skills" / folder / "SKILL.md").write_text("---\nname: ../../escape\n---\nhi\n")
    (path / "skills" / "productivity" / "standup" / "..notes").write_text("hidden")
    jobs_file = path / "cron" / "jobs.json"
    jobs = json.loads(jobs_file.read_text())
    jobs["jobs"][0]["id"] = "../../../etc/cron.d/evil"
    jobs_file.write_text(json.dumps(jobs))
    (path / "SOUL.md").write_text("Be kind.\x00\x1b[2J\x1b]0;owned\x07 Always.\r\n# Heading\n")
    result = apply(home, "hermes", path)
    assert result.returncode == 0, result.stderr
    assert "skills/my skill: its name is not a plain folder name; not imported" in result.stdout
    skills = home.workspace / "skills"
    assert sorted(p.name for p in skills.iterdir()) == ["a..b", "remember", "standup"]
    assert sorted(p.name for p in (skills / "standup").iterdir()) == ["SKILL.md"]
    assert not (home.root / "escape").exists() and not (home.workspace / "escape").exists()
    ids = [s["id"] for s in json.loads(home.schedules.read_text())["schedules"]]
    assert len(ids) == 1 and re.fullmatch(r"imp-[0-9a-f]{12}", ids[0])
    soul = (home.workspace / "SOUL.md").read_text()
    assert "Be kind.[2J]0;owned Always.\n# Heading" in soul
    assert "\x00" not in soul and "\x1b" not in soul and "\r" not in soul


def test_an_import_refused_midway_changes_nothing(home: Home, tmp_path: Path) -> None:
    path = source(tmp_path, "nanobot")
    before = {k: v for k, v in snapshot(home.root).items() if not k.startswith("locks")}
    result = apply(home, "nanobot", path, NANOMEM_SCHEDULE__MAX_TOTAL="1")
    assert result.returncode == 1
    assert "nothing more was imported: beyond schedule.max_total (1 in all)" in result.stderr
    after = {k: v for k, v in snapshot(home.root).items() if not k.startswith("locks")}
    assert after == before


def test_a_wide_tree_of_empty_folders_is_looked_into_only_so_far(
    home: Home, tmp_path: Path
) -> None:
    path = source(tmp_path, "hermes")
    for n in range(2100):
        (path / "skills" / f"category-{n:04}").mkdir()
    result = run_cli_here("import", "hermes", str(path), env=cli_env(home))
    assert result.returncode == 0, result.stderr
    assert "past 2000 folders; it and the rest were not looked into" in result.stdout


def test_a_known_key_in_imported_history_is_masked(home: Home, tmp_path: Path) -> None:
    path = source(tmp_path, "nanobot")
    line = {"cursor": 9, "timestamp": "2026-11-21 10:00", "content": f"- key is {TEST_KEY}"}
    with (path / "workspace" / "memory" / "history.jsonl").open("a") as fh:
        fh.write(json.dumps(line) + "\n")
    result = apply(home, "nanobot", path, NANOMEM_LLM__API_KEY=TEST_KEY)
    assert result.returncode == 0, result.stderr
    assert TEST_KEY not in everything_in(home)
    assert "- key is ***" in (home.workspace / "memory" / "history.jsonl").read_text()


def test_skills_are_not_written_through_a_link_in_the_home(home: Home, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    skills = home.workspace / "skills"
    for folder in skills.iterdir():
        (folder / "SKILL.md").unlink()
        folder.rmdir()
    skills.rmdir()
    skills.symlink_to(elsewhere)
    result = apply(home, "nanobot", source(tmp_path, "nanobot"))
    assert result.returncode == 0, result.stderr
    assert "the home's workspace/skills is a link, not a folder; no skill copied" in result.stdout
    assert list(elsewhere.iterdir()) == []


def test_a_memory_file_of_the_home_that_is_a_link_stops_it_cleanly(
    home: Home, tmp_path: Path
) -> None:
    (tmp_path / "config-copy").write_text(SECRET)
    user = home.workspace / "USER.md"
    user.unlink()
    user.symlink_to(tmp_path / "config-copy")
    before = snapshot(home.root)
    path = source(tmp_path, "nanobot")
    env = cli_env(home)
    for extra in ([], ["--apply"]):
        result = run_cli_here("import", "nanobot", str(path), *extra, env=env)
        assert result.returncode == 1
        assert "memory files must be plain files in the workspace" in result.stderr
        assert "Traceback" not in result.stderr and SECRET not in result.stderr + result.stdout
    after = snapshot(home.root)
    assert {k: v for k, v in after.items() if not k.startswith("locks")} == {
        k: v for k, v in before.items() if not k.startswith("locks")
    }


def test_names_from_the_source_cannot_drive_the_terminal(home: Home, tmp_path: Path) -> None:
    path = source(tmp_path, "openclaw")
    jobs_file = path / "cron" / "jobs.json"
    jobs = json.loads(jobs_file.read_text())
    jobs["jobs"][2]["name"] = "Nightly\x1b]0;owned\x07\nAll imported fine"
    jobs_file.write_text(json.dumps(jobs))
    (path / "workspace" / "memory" / "notes\x1b[2J\nfake.md").write_text("- a note\n")
    result = run_cli_here("import", "openclaw", str(path), env=cli_env(home))
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "\nfake.md" not in result.stdout and "\nAll imported fine" not in result.stdout
    assert "jobs.json 'Nightly\\x1b]0;owned\\x07\\nAll imported fine': runs" in result.stdout
    assert "  workspace/memory/notes fake.md → memory/MEMORY.md" in result.stdout
    assert apply(home, "openclaw", path).returncode == 0
    memory = (home.workspace / "memory" / "MEMORY.md").read_text()
    assert "\n## Imported from openclaw: workspace/memory/notes[2J fake.md\n\n- a note\n" in memory
    assert "\x1b" not in memory


def test_a_giant_message_in_state_db_is_cut_in_sqlite(home: Home, tmp_path: Path) -> None:
    import sqlite3

    path = source(tmp_path, "hermes")
    db = sqlite3.connect(path / "state.db")
    db.execute(
        "INSERT INTO sessions (id, source, started_at) VALUES (?, 'cli', ?)",
        ("20261122_090000_ffffff", 1763802000.0),
    )
    db.execute(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
        ("20261122_090000_ffffff", "x" * 3_000_000, 1763802000.0),
    )
    db.commit()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    result = apply(home, "hermes", path)
    assert result.returncode == 0, result.stderr
    entries = [
        json.loads(line)
        for line in (home.workspace / "memory" / "history.jsonl").read_text().splitlines()
    ]
    giant = [e for e in entries if e["content"].startswith(("user: xxx", "xxx"))]
    assert sum(len(e["content"]) for e in giant) == len("user: ") + 100_000
    assert {e["parts"] for e in giant} == {7} and max(len(e["content"]) for e in giant) == 16_000
