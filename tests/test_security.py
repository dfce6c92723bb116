"""Attacks from a hostile model or hostile files, through the real `nanomem` command."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from nanomem.home import Home
from tests.conftest import NANOMEM, TEST_KEY, cli_env, run_cli, run_cli_here, sleeper, survivors
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.leaks import secret_free_files


def payload(marker: Path) -> str:
    return "{{ cycler.__init__.__globals__.os.popen('touch " + str(marker) + "').read() }}"


def assert_potent(tmp_path: Path) -> None:
    """Positive control: rendered without the sandbox, the payload does touch its marker."""
    import jinja2

    control = tmp_path / "CONTROL"
    jinja2.Environment().from_string(payload(control)).render()
    assert control.exists()


def test_the_agent_cannot_write_a_template(
    home: Home, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    marker = tmp_path / "PWNED"
    fake_llm.tool_call("write_file", {"path": "templates/system.md.j2", "content": payload(marker)})
    fake_llm.reply("tried")
    fake_llm.reply("next turn")
    env = cli_env(home, fake_llm)
    assert run_cli_here("chat", "-m", "rewrite your own rules", env=env).returncode == 0
    observation = fake_llm.requests[1]["messages"][-1]["content"]
    assert observation.startswith("Error:") and "maintained by nanomem" in observation
    assert not (home.workspace / "templates" / "system.md.j2").exists()
    assert run_cli_here("chat", "-m", "and now?", env=env).returncode == 0
    assert not marker.exists()
    assert_potent(tmp_path)


def test_a_hostile_template_on_disk_runs_nothing(
    home: Home, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    marker = tmp_path / "PWNED"
    overrides = home.workspace / "templates"
    overrides.mkdir(exist_ok=True)
    (overrides / "system.md.j2").write_text(payload(marker))
    fake_llm.reply("fine")
    result = run_cli_here("chat", "-m", "hello", env=cli_env(home, fake_llm))
    assert result.returncode == 0 and result.stdout.strip() == "fine", result.stderr
    assert not marker.exists()
    assert_potent(tmp_path)
    system = fake_llm.requests[0]["messages"][0]["content"]
    assert "cycler" not in system and len(system) > 200  # the bundled prompt instead
    log = (home.logs / "nanomem.log").read_text()
    assert f"template {overrides / 'system.md.j2'} cannot be used" in log
    assert "Traceback" not in result.stderr


ENV_KEY = "sk-from-the-environment-0123456789abcdef"


def test_a_refused_environment_key_is_never_written_and_is_named(
    home: Home, fake_llm: FakeOpenAI
) -> None:
    env = cli_env(home, fake_llm)
    del env["NANOMEM_LLM__API_KEY"]
    env["OPENAI_API_KEY"] = ENV_KEY
    fake_llm.error(401, f"Incorrect API key provided: {ENV_KEY}. Find your key at ...")
    result = run_cli_here("chat", "-m", "hi", env=env)
    assert result.returncode == 1
    assert "the environment variable OPENAI_API_KEY" in result.stderr
    assert fake_llm.auth_headers[0] == f"Bearer {ENV_KEY}"  # the key was really used
    assert ENV_KEY not in result.stderr + result.stdout
    log = (home.logs / "nanomem.log").read_text()
    assert "Incorrect API key provided: ***" in log  # the provider's words, masked
    assert secret_free_files(home, ENV_KEY) == []


def test_a_secret_the_model_repeats_is_masked_before_it_is_saved_or_shown(
    home: Home, fake_llm: FakeOpenAI
) -> None:
    env = cli_env(home, fake_llm, OPENAI_API_KEY=ENV_KEY)
    fake_llm.reply(f"Sure, the key is {ENV_KEY} and the token is {TEST_KEY}.")
    result = run_cli_here("chat", "-m", "tell me your keys", env=env)
    assert (
        result.returncode == 0
        and result.stdout.strip() == "Sure, the key is *** and the token is ***."
    )
    assert secret_free_files(home, ENV_KEY) == secret_free_files(home, TEST_KEY) == []


def test_mistyped_secret_keys_are_not_echoed(home: Home) -> None:
    home.config.write_text(home.config.read_text() + '\n[extra]\nAPIKEY = "sk-typo-0123456789"\n')
    result = run_cli_here("status", env=cli_env(home))
    assert result.returncode == 2 and "[extra]: unknown setting" in result.stderr
    assert "sk-typo" not in result.stderr + result.stdout
    assert secret_free_files(home, "sk-typo-0123456789") == []


def test_a_home_that_was_readable_by_others_is_made_private(
    home: Home, fake_llm: FakeOpenAI
) -> None:
    fake_llm.reply("first")
    env = cli_env(home, fake_llm)
    assert run_cli_here("chat", "-m", "one", env=env).returncode == 0
    for path in [home.root, *home.root.rglob("*")]:  # as if copied from a backup, say
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
    fake_llm.reply("second")
    result = run_cli_here("chat", "-m", "two", env=env)
    assert result.returncode == 0 and "private (they were readable by others)" in result.stderr
    private = [home.root, home.sessions, home.logs, home.memory_git, home.config]
    private += [*home.sessions.iterdir(), *home.logs.iterdir(), *home.memory_git.rglob("*")]
    loose = {str(p): oct(p.stat().st_mode & 0o777) for p in private if p.stat().st_mode & 0o077}
    assert loose == {}
    assert any(home.sessions.iterdir()) and any(home.logs.iterdir())  # there was something
    again = run_cli_here("onboard", env=env)
    assert again.returncode == 0 and "nothing changed" in again.stdout


def test_onboarding_an_existing_loose_home_says_it_tightened_it(tmp_path: Path) -> None:
    root = tmp_path / "existing"
    (root / "sessions").mkdir(parents=True)
    (root / "sessions" / "old.jsonl").write_text("{}\n")
    root.chmod(0o755)
    (root / "sessions").chmod(0o755)
    (root / "sessions" / "old.jsonl").chmod(0o644)
    result = run_cli_here("--home", str(root), "onboard", env=cli_env(Home(root)))
    assert result.returncode == 0 and f"in {root} private (owner only)" in result.stdout
    assert (root / "sessions" / "old.jsonl").stat().st_mode & 0o777 == 0o600
    assert root.stat().st_mode & 0o777 == 0o700
    created = root / "config.toml"
    assert created.stat().st_mode & 0o777 == 0o600


def test_the_shell_shows_no_secret_and_kills_what_escapes(
    home: Home, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    sleep = sleeper()
    escape = f"setsid sh -c 'echo up > up; exec {shlex.join(sleep)}' >/dev/null 2>&1 & sleep 60"
    fake_llm.tool_call("exec", {"command": "env"})
    fake_llm.tool_call("exec", {"command": escape})
    fake_llm.reply("done")
    env = cli_env(
        home,
        fake_llm,
        OPENAI_API_KEY=ENV_KEY,
        NANOMEM_TOOLS__SHELL_ENABLED="true",
        NANOMEM_TOOLS__SHELL_APPROVAL="off",  # what runs is tested here, not who approves
        NANOMEM_TOOLS__SHELL_TIMEOUT_S="2",
    )
    result = run_cli("chat", "-m", "show me your environment", env=env)
    assert result.returncode == 0, result.stderr
    shown = fake_llm.requests[1]["messages"][-1]["content"]
    assert shown.startswith("exit code 0") and "PATH=" in shown  # the command did run
    assert ENV_KEY not in shown and TEST_KEY not in shown and "NANOMEM_" not in shown
    timed_out = fake_llm.requests[2]["messages"][-1]["content"]
    assert "timed out after 2s" in timed_out
    assert (home.workspace / "up").exists()  # the escape did start
    assert survivors(sleep, within_s=5) == []
    assert secret_free_files(home, ENV_KEY) == secret_free_files(home, TEST_KEY) == []


def test_a_gigabyte_of_shell_output_keeps_the_agent_small(home: Home, fake_llm: FakeOpenAI) -> None:
    fake_llm.tool_call("exec", {"command": "yes nanomem | head -c 1000000000; echo THE-END"})
    fake_llm.reply("done")
    env = cli_env(
        home,
        fake_llm,
        NANOMEM_TOOLS__SHELL_ENABLED="true",
        NANOMEM_TOOLS__SHELL_APPROVAL="off",  # what runs is tested here, not who approves
        NANOMEM_TOOLS__SHELL_TIMEOUT_S="120",
        NANOMEM_LLM__TRANSPORT="direct",  # litellm alone weighs ~200 MB
    )
    measure = (
        "import resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True)\n"
        "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", measure, *NANOMEM, "chat", "-m", "flood"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    code, peak_mib = result.stdout.split()
    assert code == "0", result.stderr
    shown = fake_llm.requests[1]["messages"][-1]["content"]
    assert "THE-END" in shown and "bytes cut" in shown and len(shown) < 17000
    assert int(peak_mib) < 200


def test_a_secret_in_a_file_never_reaches_the_model(home: Home, fake_llm: FakeOpenAI) -> None:
    (home.workspace / "notes.md").write_text(f"deploy with key {TEST_KEY}\n")
    fake_llm.tool_call("read_file", {"path": "notes.md"})
    fake_llm.reply("read it")
    assert run_cli_here("chat", "-m", "read my notes", env=cli_env(home, fake_llm)).returncode == 0
    seen = fake_llm.requests[1]["messages"][-1]["content"]
    assert seen == "deploy with key ***\n"  # the file was read, the key masked
