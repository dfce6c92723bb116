"""A home moved whole: made by the real commands (onboard, chats with the loopback model, a
Dream, a schedule), `nanomem export`, `nanomem import-home` into another home; the same memory,
versions, history, sessions and schedules there, and not one secret in the archive."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

from nanomem.features.schedules import ScheduleStore
from nanomem.features.schedules.rules import Schedule
from nanomem.gateway.claim import claim
from nanomem.home import Home
from nanomem.memory import GitStore
from tests.conftest import NANOMEM, TEST_KEY, cli_env, run_cli_here, settings_for
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.dream import script_a_dream

BOT_TOKEN = "123456:telegram-secret-token-abcdefghij"
API_KEY = "agent-api-secret-key-0123456789abcdef"
MCP_TOKEN = "mcp-secret-token-0123456789"
SECRETS = (TEST_KEY, BOT_TOKEN, API_KEY, MCP_TOKEN)
MEMORY = ("SOUL.md", "USER.md", "memory/MEMORY.md", "memory/history.jsonl", "memory/.cursor")


def with_secrets(home: Home) -> None:
    """Every kind of secret a config holds, written as a person would."""
    text = home.config.read_text()
    text = text.replace("[llm]\n", f'[llm]\napi_key = "{TEST_KEY}"\n', 1)
    text = text.replace('# token = ""', f'token = "{BOT_TOKEN}"', 1)
    text = text.replace("# keys = []", f'keys = ["{API_KEY}"]', 1)
    text += (
        '\n[mcp.servers.tracker]\nurl = "https://tracker.example/mcp"\n'
        f'headers = {{ Authorization = "Bearer {MCP_TOKEN}" }}\nenabled = false\n'
    )
    home.config.write_text(text)


def lived_in(home: Home, fake_llm: FakeOpenAI) -> dict[str, str]:
    """Two turns, the chat archived to history, a Dream that made a memory version, and a
    schedule: a home as weeks of use leave it."""
    with_secrets(home)
    env = cli_env(home, fake_llm)
    fake_llm.reply("Nice to meet you, Ada!")
    assert run_cli_here("chat", "-m", "I'm Ada and I love green tea", env=env).returncode == 0
    fake_llm.reply("- 2026-11-22: the user is Ada and loves green tea")
    assert "Archived 2 messages" in run_cli_here("chat", "-m", "/new", env=env).stdout
    fake_llm.reply("Noted.")
    assert (
        run_cli_here("chat", "-m", "remind me of tea", "--session", "tea", env=env).returncode == 0
    )
    script_a_dream(fake_llm)
    dreamed = run_cli_here("dream", env=env)
    assert dreamed.returncode == 0, dreamed.stderr
    ScheduleStore.of(home, settings_for(home).schedule).add(
        Schedule(
            "tea1", "cli:direct", "tea time", "2026-11-27T10:00:00+00:00", "UTC", cron="0 9 * * *"
        )
    )
    return env


def members(archive: bytes) -> dict[str, bytes]:
    """An archive's files by name, in their order."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]


def tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def test_a_home_moves_whole_and_without_its_secrets(
    home: Home, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    env = lived_in(home, fake_llm)
    archive = tmp_path / "moving.tar.gz"
    exported = run_cli_here("export", str(archive), env=env)
    assert exported.returncode == 0, exported.stderr
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    said = exported.stdout
    assert f"Exported to {archive}" in said
    for name in ("llm.api_key", "telegram.token", "api.keys", "mcp.servers.tracker.headers"):
        assert name in said
    assert "logs: log files" in said and "inbox" not in said.split("Not archived:")[0]

    raw = archive.read_bytes()
    unpacked = gzip.decompress(raw)
    for secret in SECRETS:  # in no byte: not the archive's, not its inflated tar's
        assert secret.encode() not in raw and secret.encode() not in unpacked
        assert secret not in said
    names = list(members(raw))
    assert names[0] == "manifest.json"
    assert not any(n.startswith(("logs/", "locks/")) for n in names)

    new = Home(tmp_path / "elsewhere" / "home")
    imported = run_cli_here("--home", str(new.root), "import-home", str(archive), env=env)
    assert imported.returncode == 0, imported.stderr
    assert "nanomem config set llm.api_key …" in imported.stdout
    assert "nanomem config set telegram.token …" in imported.stdout
    assert "sessions        2" in imported.stdout  # `nanomem status`, run on the new home

    for name in MEMORY:
        assert (new.workspace / name).read_bytes() == (home.workspace / name).read_bytes(), name
    assert tree(new.sessions) == tree(home.sessions) != {}
    assert tree(new.memory_git) == tree(home.memory_git)
    assert new.schedules.read_bytes() == home.schedules.read_bytes()
    assert new.usage.read_bytes() == home.usage.read_bytes() != b""  # the tokens spent
    assert "usage.jsonl" not in said.split("Not archived:")[-1]
    assert stat.S_IMODE(new.root.stat().st_mode) == 0o700
    restored = new.config.read_text()
    assert all(secret not in restored for secret in SECRETS)
    assert "\n# api_key = … (left out by nanomem export)\n" in restored

    new_env = {**env, "NANOMEM_HOME": str(new.root)}
    old_usage, new_usage = (run_cli_here("usage", "--json", env=e) for e in (env, new_env))
    assert new_usage.returncode == 0 and new_usage.stdout == old_usage.stdout
    assert json.loads(new_usage.stdout)["total"]["calls"] >= 3, new_usage.stdout
    fake_llm.reply("Green tea, Ada.")
    again = run_cli_here("chat", "-m", "what do I drink?", "--session", "tea", env=new_env)
    assert again.returncode == 0 and again.stdout.strip() == "Green tea, Ada."
    sent = fake_llm.requests[-1]["messages"]
    assert "- Name: Ada" in sent[0]["content"]  # USER.md as the Dream left it
    assert any("remind me of tea" in str(m.get("content")) for m in sent), sent  # it goes on

    old_log, new_log = (run_cli_here("memory", "log", env=e) for e in (env, new_env))
    assert new_log.returncode == 0 and new_log.stdout == old_log.stdout
    assert "dream: USER.md" in new_log.stdout
    versions = run_cli_here("memory", "restore", env=new_env).stdout
    assert versions == run_cli_here("memory", "restore", env=env).stdout
    sha = new_log.stdout.split()[0]
    undone = run_cli_here("memory", "restore", sha, env=new_env)
    assert undone.returncode == 0, undone.stderr
    assert "Ada" not in (new.workspace / "USER.md").read_text()
    assert "Ada" in (home.workspace / "USER.md").read_text()  # the old home is its own


def snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    return {
        p.relative_to(root).as_posix(): (p.lstat().st_mode, b"" if p.is_dir() else p.read_bytes())
        for p in sorted(root.rglob("*"))
    }


def test_a_home_that_holds_memory_is_kept_unless_forced_and_then_moved_aside(
    home: Home, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    env = cli_env(home, fake_llm)
    fake_llm.reply("Hello")
    assert run_cli_here("chat", "-m", "hi", env=env).returncode == 0
    archive = tmp_path / "a.tar.gz"
    assert run_cli_here("export", str(archive), env=env).returncode == 0
    fake_llm.reply("Hello again")
    assert run_cli_here("chat", "-m", "said after the export", env=env).returncode == 0
    before = snapshot(home.root)

    refused = run_cli_here("import-home", str(archive), env=env)
    assert refused.returncode == 1
    assert f"{home.root} already holds memory" in refused.stderr
    assert "Nothing was changed" in refused.stderr and "--force" in refused.stderr
    assert snapshot(home.root) == before

    forced = run_cli_here("import-home", str(archive), "--force", env=env)
    assert forced.returncode == 0, forced.stderr
    aside = next(home.root.parent.glob("home.before-import-*"))
    assert f"The home that was there is now {aside}" in forced.stdout

    def said(root: Path) -> str:
        return "".join(data.decode() for data in tree(root / "sessions").values())

    assert "said after the export" in said(aside)
    assert "said after the export" not in said(home.root)
    assert [p.name for p in home.root.parent.iterdir() if ".import-" in p.name] == []


def test_a_just_onboarded_home_is_replaced_without_force(home: Home, tmp_path: Path) -> None:
    source = Home(tmp_path / "source")
    run_cli_here("onboard", env=cli_env(source))
    (source.workspace / "USER.md").write_text("# User\n- Name: Ada\n")
    archive = tmp_path / "a.tar.gz"
    assert run_cli_here("export", str(archive), env=cli_env(source)).returncode == 0
    done = run_cli_here("import-home", str(archive), env=cli_env(home))
    assert done.returncode == 0, done.stderr  # onboarding's files are no one's memory yet
    assert (home.workspace / "USER.md").read_text() == "# User\n- Name: Ada\n"


def test_what_a_running_gateway_leaves_in_the_home_stays_behind_with_its_reason(
    home: Home, tmp_path: Path
) -> None:
    for name in ("inbox.sqlite3", "inbox.sqlite3-wal", "inbox.sqlite3-shm", "gateway.json"):
        (home.root / name).write_bytes(b"of this machine")
    home.unread.mkdir()
    (home.unread / "cli%3Adirect.jsonl").write_text('{"text": "tea time"}\n')
    archive = tmp_path / "a.tar.gz"
    done = run_cli_here("export", str(archive), env=cli_env(home))
    assert done.returncode == 0, done.stderr
    left = done.stdout.split("Not archived:")[1]
    assert "not part of a home nanomem knows" not in left, left
    inbox = "the gateway's inbox (messages in flight on this machine)"
    for name in ("inbox.sqlite3", "inbox.sqlite3-wal", "inbox.sqlite3-shm"):
        assert f"{name}: {inbox}" in left
    assert "unread: what the gateway left for a terminal chat" in left
    assert not any(n.startswith(("inbox", "unread")) for n in members(archive.read_bytes()))


def test_no_import_while_a_gateway_runs_on_the_home(home: Home, tmp_path: Path) -> None:
    archive = tmp_path / "a.tar.gz"
    assert run_cli_here("export", str(archive), env=cli_env(home)).returncode == 0
    with claim(home, 18790):
        before = snapshot(home.root)
        refused = run_cli_here("import-home", str(archive), "--force", env=cli_env(home))
        after = snapshot(home.root)
    assert refused.returncode == 1
    assert (
        refused.stderr.strip()
        == f"nanomem: a gateway runs on {home.root}; stop it, then import again"
    )
    assert after == before


def test_a_file_holding_a_secret_value_stays_behind(home: Home, tmp_path: Path) -> None:
    (home.workspace / "notes.md").write_text(f"my key is {TEST_KEY}\n")
    (home.workspace / "plan.md").write_text("tea at nine\n")
    (home.workspace / "deploy.md").write_text("export GITHUB_TOKEN=ghp_from_the_shell_0123\n")
    env = cli_env(  # from the environment, not the file
        home, NANOMEM_LLM__API_KEY=TEST_KEY, GITHUB_TOKEN="ghp_from_the_shell_0123"
    )
    archive = tmp_path / "a.tar.gz"
    done = run_cli_here("export", str(archive), env=env)
    assert done.returncode == 0, done.stderr
    assert "workspace/notes.md: it holds the value of a secret" in done.stdout
    assert "workspace/deploy.md: it holds the value of a secret" in done.stdout
    names = list(members(archive.read_bytes()))
    assert "workspace/plan.md" in names and "workspace/notes.md" not in names
    assert "workspace/deploy.md" not in names
    assert TEST_KEY.encode() not in gzip.decompress(archive.read_bytes())


def test_a_secret_in_an_inline_table_of_a_broken_config_stays_behind(
    home: Home, tmp_path: Path
) -> None:
    """A config the app refuses (a misspelt table) is still exported, scrubbed by its text
    alone: a token inside an inline table must go as one on a line of its own does."""
    home.config.write_text(
        '[lm]\nmodel = "typo"\n\n[mcp]\n'
        f'servers = {{ gh = {{ command = "gh-mcp", env = {{ GITHUB_TOKEN = "{MCP_TOKEN}" }} }} }}\n'
    )
    archive = tmp_path / "a.tar.gz"
    done = run_cli_here("export", str(archive), env=cli_env(home))
    assert done.returncode == 0, done.stderr
    assert "mcp.servers.gh.env" in done.stdout  # named among the secrets left out
    config = members(archive.read_bytes())["config.toml"].decode()
    assert MCP_TOKEN not in config and 'command = "gh-mcp"' in config


def test_the_import_says_what_the_restored_settings_run(home: Home, tmp_path: Path) -> None:
    """An archive may not be the person's own: the programs its config starts and the shell
    commands it allows without asking are named, before anything runs them."""
    env = cli_env(home)
    for key, value in (
        ("mcp.servers.files.command", "npx"),
        ("mcp.servers.files.args", '["-y", "server-filesystem", "/srv/notes"]'),
        ("tools.shell_enabled", "true"),
    ):
        assert run_cli_here("config", "set", key, value, env=env).returncode == 0
    home.shell_allowlist.write_text('{"v": 1, "prefixes": ["git status"]}\n')
    archive = tmp_path / "a.tar.gz"
    assert run_cli_here("export", str(archive), env=env).returncode == 0
    new = Home(tmp_path / "elsewhere")
    done = run_cli_here("--home", str(new.root), "import-home", str(archive), env=env)
    assert done.returncode == 0, done.stderr
    said = done.stdout
    assert "What this home's settings run" in said
    assert "mcp.servers.files starts: npx -y server-filesystem /srv/notes" in said
    assert "the shell runs without asking: git status" in said


def test_an_existing_file_is_never_replaced(home: Home, tmp_path: Path) -> None:
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(b"precious")
    done = run_cli_here("export", str(archive), env=cli_env(home))
    assert done.returncode == 2 and "exists; name another file" in done.stderr
    assert archive.read_bytes() == b"precious"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == []


def test_the_command_writes_a_private_file_here_or_a_pipe(home: Home, tmp_path: Path) -> None:
    """In its own process: the default name in the working folder, and `-` down a pipe."""
    env = cli_env(home)
    named = subprocess.run([*NANOMEM, "export"], env=env, cwd=tmp_path, capture_output=True)
    assert named.returncode == 0, named.stderr
    (written,) = tmp_path.glob("nanomem-home-*.tar.gz")
    assert len(written.name) == len("nanomem-home-20261127-101500.tar.gz")
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    piped = subprocess.run([*NANOMEM, "export", "-"], env=env, cwd=tmp_path, capture_output=True)
    assert piped.returncode == 0, piped.stderr
    assert b"Exported to standard output" in piped.stderr
    manifest = json.loads(members(piped.stdout)["manifest.json"])
    assert manifest["format"] == "nanomem-home" and manifest["version"] == 1
    new = tmp_path / "restored"
    restored = subprocess.run(
        [*NANOMEM, "--home", str(new), "import-home", "-"],
        env=env,
        input=piped.stdout,
        capture_output=True,
    )
    assert restored.returncode == 2 and b"reads a file, twice" in restored.stderr
    assert not new.exists()
    done = subprocess.run(
        [*NANOMEM, "--home", str(new), "import-home", str(written)], env=env, capture_output=True
    )
    assert done.returncode == 0, done.stderr
    assert (Path(new) / "workspace" / "SOUL.md").read_bytes() == (
        home.workspace / "SOUL.md"
    ).read_bytes()


@pytest.mark.slow  # a process of its own waiting on the lock this one holds
def test_the_snapshot_waits_for_a_memory_write_to_finish(home: Home, tmp_path: Path) -> None:
    """While a writer holds the memory lock (as a Dream's commit does), the export waits:
    it never copies memory.git and the memory files halfway through a change."""
    archive = tmp_path / "a.tar.gz"
    lock = home.lock("memory")
    lock.acquire_sync()
    try:
        export = subprocess.Popen([*NANOMEM, "export", str(archive)], env=cli_env(home))
        with pytest.raises(subprocess.TimeoutExpired):
            export.wait(timeout=2)  # what a snapshot takes without waiting: ~0.3 s
        (home.workspace / "USER.md").write_text("# User\n- written under the lock\n")
    finally:
        lock.release()
    assert export.wait(timeout=60) == 0
    assert "written under the lock" in members(archive.read_bytes())["workspace/USER.md"].decode()


def test_a_workspace_kept_elsewhere_comes_home(home: Home, tmp_path: Path) -> None:
    elsewhere = tmp_path / "my-workspace"
    shutil.copytree(home.workspace, elsewhere)
    (elsewhere / "USER.md").write_text("# User\n- lives elsewhere\n")
    text = home.config.read_text().replace("[agent]\n", f'[agent]\nworkspace = "{elsewhere}"\n', 1)
    home.config.write_text(text)
    archive = tmp_path / "a.tar.gz"
    done = run_cli_here("export", str(archive), env=cli_env(home))
    assert done.returncode == 0, done.stderr
    assert "Settings left out: agent.workspace (the workspace is in the archive" in done.stdout
    new = Home(tmp_path / "new")
    assert (
        run_cli_here(
            "--home", str(new.root), "import-home", str(archive), env=cli_env(new)
        ).returncode
        == 0
    )
    assert (new.workspace / "USER.md").read_text() == "# User\n- lives elsewhere\n"
    assert str(elsewhere) not in new.config.read_text()


def test_links_and_fifos_in_the_workspace_are_named_and_left_out(
    home: Home, tmp_path: Path
) -> None:
    secret_file = tmp_path / "outside.txt"
    secret_file.write_text("not the workspace's\n")
    (home.workspace / "outside").symlink_to(secret_file)
    (home.workspace / "elsewhere").symlink_to(tmp_path, target_is_directory=True)
    os.mkfifo(home.workspace / "pipe")  # an export that opened it plainly would hang here
    archive = tmp_path / "a.tar.gz"
    done = run_cli_here("export", str(archive), env=cli_env(home))
    assert done.returncode == 0, done.stderr
    for name, why in (
        ("outside", "a link"),
        ("elsewhere", "a link"),
        ("pipe", "not a regular file"),
    ):
        assert f"{home.workspace / name}: {why}" in done.stdout
    names = members(archive.read_bytes())
    assert not any(
        n.startswith(("workspace/outside", "workspace/elsewhere", "workspace/pipe")) for n in names
    )
    assert b"not the workspace's" not in gzip.decompress(archive.read_bytes())


def test_versions_of_memory_count_even_when_the_files_are_back_as_onboarded(
    home: Home, tmp_path: Path
) -> None:
    archive = tmp_path / "a.tar.gz"
    assert run_cli_here("export", str(archive), env=cli_env(home)).returncode == 0
    user = home.workspace / "USER.md"
    onboarded = user.read_text()
    git = GitStore(home.memory_git, home.workspace, lock=home.lock("memory"))
    user.write_text(onboarded + "- Name: Ada\n")
    git.commit_if_changed("manual edit")
    user.write_text(onboarded)
    git.commit_if_changed("manual edit")
    refused = run_cli_here("import-home", str(archive), env=cli_env(home))
    assert refused.returncode == 1, refused.stderr
    assert f"already holds memory:\n  {home.memory_git}\n" in refused.stderr
