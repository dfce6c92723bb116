"""Onboarding through the real CLI: flags are written and never asked for; what is missing is
asked once on a terminal (a pseudo-terminal here) and never when stdin is not one; a workspace
that is not there is an error, or created when the person at a terminal says so; a refused key
names the variable it came from."""

from __future__ import annotations

import io
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pexpect
import pytest

from nanomem.cli.web_setup import QUESTION as WEB_QUESTION
from nanomem.home import Home
from tests.conftest import NANOMEM, cli_env, run_cli
from tests.fakes.openai_server import FakeOpenAI

PROMPT = "you ›"  # nanomem chat's input prompt
QUESTIONS = ("Model (", "Base URL", "API key (", "Create it?")


def bare_env(home: Home, **extra: str) -> dict[str, str]:
    """No model, server or key from anywhere: what a new user starts with."""
    env = cli_env(home, TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1", **extra)
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE", "OLLAMA_API_KEY"):
        env.pop(name, None)
    env.update(extra)  # unless the test gives one
    return env


def spawn(env: dict[str, str], *args: str) -> tuple[pexpect.spawn, io.StringIO]:
    child = pexpect.spawn(
        sys.executable, ["-m", "nanomem", *args], env=env, encoding="utf-8", timeout=30
    )
    transcript = io.StringIO()
    child.logfile_read = transcript  # everything the person saw
    return child, transcript


def llm_table(home: Home) -> dict[str, object]:
    return dict(tomllib.loads(home.config.read_text())["llm"])


def test_onboard_asks_only_what_the_flags_left_and_hides_the_key(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    child, seen = spawn(bare_env(home), "onboard", "--model", "openai/gpt-4o-mini")
    child.expect_exact("Base URL")
    child.sendline("")
    child.expect_exact("API key")
    child.expect_exact("OPENAI_API_KEY")  # the other place the key may live
    child.sendline("sk-typed-and-hidden")
    child.expect_exact("Connect Telegram now? [y/N]")
    child.sendline("")
    child.expect_exact(WEB_QUESTION)
    child.sendline("")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, seen.getvalue()
    assert "Model (" not in seen.getvalue()  # the flag wins
    assert "sk-typed-and-hidden" not in seen.getvalue()  # never echoed
    assert llm_table(home) == {"model": "openai/gpt-4o-mini", "api_key": "sk-typed-and-hidden"}
    assert stat.S_IMODE(home.config.stat().st_mode) == 0o600


def test_a_key_in_the_environment_is_not_asked_for(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    env = bare_env(home, OPENAI_API_KEY="sk-from-the-environment")
    child, seen = spawn(
        env, "onboard", "--model", "openai/gpt-4o-mini", "--api-base", "http://h/v1"
    )
    child.expect_exact("Using the API key in the environment variable OPENAI_API_KEY")
    child.expect_exact("Connect Telegram now? [y/N]")
    child.sendline("n")
    child.expect_exact(WEB_QUESTION)
    child.sendline("")
    child.expect(pexpect.EOF)
    assert not any(question in seen.getvalue() for question in QUESTIONS)
    assert llm_table(home) == {"model": "openai/gpt-4o-mini", "api_base": "http://h/v1"}


def test_a_typed_name_without_provider_is_explained_and_asked_again(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    child, _ = spawn(bare_env(home), "onboard")
    child.expect_exact("Model (")
    child.sendline("llama3.1")
    child.expect_exact("Base URL")
    child.sendline("")
    child.expect_exact("`ollama/llama3.1`")
    child.expect_exact("Model (")
    child.sendline("ollama/llama3.1")
    child.expect_exact("empty if the server needs none")  # a local server: no key needed
    child.sendline("")
    child.expect_exact("Connect Telegram now? [y/N]")
    child.sendline("")
    child.expect_exact(WEB_QUESTION)
    child.sendline("")
    child.expect(pexpect.EOF)
    assert llm_table(home) == {"model": "ollama/llama3.1"}


def test_a_typed_name_with_spaces_is_refused_before_the_base_url_question(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    child, seen = spawn(bare_env(home), "onboard")
    child.expect_exact("Model (")
    child.sendline("ls -la")
    child.expect_exact("is not a model name")
    child.expect_exact("Model (")
    assert "Base URL" not in seen.getvalue()  # asked again at once, not after the server
    child.sendline("openai/gpt-4o-mini")
    child.expect_exact("Base URL")
    child.sendline("http://localhost:11434/v1")
    child.expect_exact("empty if the server needs none")
    child.sendline("")
    child.expect_exact("Connect Telegram now? [y/N]")
    child.sendline("")
    child.expect_exact(WEB_QUESTION)
    child.sendline("")
    child.expect(pexpect.EOF)
    assert seen.getvalue().count("Base URL") == 1
    assert llm_table(home) == {
        "model": "openai/gpt-4o-mini",
        "api_base": "http://localhost:11434/v1",
    }


def test_onboard_turns_the_web_app_on_and_shows_its_token_once(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    child, seen = spawn(bare_env(home), "onboard", "--model", "ollama/llama3.1")
    child.expect_exact("empty if the server needs none")
    child.sendline("")
    child.expect_exact("Connect Telegram now? [y/N]")
    child.sendline("")
    child.expect_exact(WEB_QUESTION)
    child.sendline("y")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, seen.getvalue()
    web = tomllib.loads(home.config.read_text())["web"]
    assert web["enabled"] is True and len(web["token"]) >= 40
    shown = seen.getvalue()
    assert shown.count(web["token"]) == 1 and "http://127.0.0.1:18790/" in shown
    log = home.logs / "nanomem.log"
    assert not log.exists() or web["token"] not in log.read_text(errors="replace")

    again, seen = spawn(bare_env(home), "onboard")  # on: not offered again, never shown again
    again.expect_exact("Connect Telegram now? [y/N]")
    again.sendline("")
    again.expect(pexpect.EOF)
    assert WEB_QUESTION not in seen.getvalue() and web["token"] not in seen.getvalue()
    assert tomllib.loads(home.config.read_text())["web"] == web


def test_ctrl_d_at_a_question_writes_nothing(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    child, seen = spawn(bare_env(home), "onboard")
    child.expect_exact("Model (")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1 and "setup cancelled" in seen.getvalue()
    assert "Traceback" not in seen.getvalue() and not home.config.exists()


def test_chat_on_a_new_home_takes_its_flags_and_asks_only_for_the_key(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    home = Home(tmp_path / "home")
    flags = ("--model", "openai/fake", "--api-base", fake_llm.base_url)
    child, seen = spawn(bare_env(home), "chat", *flags)
    child.expect_exact("API key")
    child.sendline("")
    child.expect_exact(PROMPT)
    assert "Model (" not in seen.getvalue() and "Base URL" not in seen.getvalue()
    child.sendline("hello")
    child.expect_exact("echo: ")
    child.expect_exact(PROMPT)
    child.sendcontrol("d")
    child.expect(pexpect.EOF)
    assert "model" not in llm_table(home)  # chat's flags are for this run only


def test_without_a_terminal_nothing_is_asked(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    flags = ("--model", "openai/gpt-4o-mini", "--api-base", "http://127.0.0.1:9/v1")
    result = run_cli("onboard", *flags, env=bare_env(home), stdin="")  # a pipe, not a tty
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    assert not any(question in output for question in QUESTIONS)
    assert llm_table(home) == {"model": "openai/gpt-4o-mini", "api_base": "http://127.0.0.1:9/v1"}


def test_flags_change_an_existing_config_and_keep_the_rest(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    env = bare_env(home)
    assert run_cli("onboard", "--model", "openai/gpt-4o-mini", env=env, stdin="").returncode == 0
    before = home.config.read_text()
    result = run_cli("onboard", "--model", "groq/llama-3.1-8b-instant", env=env, stdin="")
    assert result.returncode == 0, result.stderr
    assert "set llm.model" in result.stdout
    assert llm_table(home) == {"model": "groq/llama-3.1-8b-instant"}
    after = home.config.read_text()
    assert after.replace("groq/llama-3.1-8b-instant", "openai/gpt-4o-mini") == before
    assert stat.S_IMODE(home.config.stat().st_mode) == 0o600


@pytest.mark.slow  # a process of its own waiting on the lock this one holds
def test_a_flag_on_an_existing_config_waits_for_the_configs_lock(tmp_path: Path) -> None:
    """`onboard --model` changes the file as `config set` does: under the home's config lock,
    so it never writes over a change another process is making."""
    home = Home(tmp_path / "home")
    env = bare_env(home)
    assert run_cli("onboard", "--model", "openai/gpt-4o-mini", env=env, stdin="").returncode == 0
    before = home.config.read_text()
    lock = home.lock("config")
    lock.acquire_sync()
    try:
        child = subprocess.Popen(
            [*NANOMEM, "onboard", "--model", "groq/llama-3.1-8b-instant"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=3)  # without waiting for the lock: done in ~1 s
        assert home.config.read_text() == before
    finally:
        lock.release()
    assert child.wait(timeout=60) == 0
    assert llm_table(home) == {"model": "groq/llama-3.1-8b-instant"}


@pytest.mark.slow  # a process of its own waiting on the lock this one holds
def test_a_new_config_is_made_under_the_configs_lock(tmp_path: Path) -> None:
    """Onboarding makes config.toml under the home's config lock: a `config set` making the
    file at the same moment is never written over."""
    home = Home(tmp_path / "home")
    lock = home.lock("config")
    lock.acquire_sync()
    try:
        child = subprocess.Popen(
            [*NANOMEM, "onboard", "--model", "openai/gpt-4o-mini"],
            env=bare_env(home),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=3)  # without waiting for the lock: done in ~1 s
        assert not home.config.exists()
    finally:
        lock.release()
    assert child.wait(timeout=60) == 0
    assert llm_table(home) == {"model": "openai/gpt-4o-mini"}


def test_a_model_flag_no_client_can_place_changes_nothing(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    result = run_cli("onboard", "--model", "llama3.1", env=bare_env(home), stdin="")
    assert result.returncode == 2
    assert "`ollama/llama3.1`" in result.stderr and "(command line)" in result.stderr
    assert not home.root.exists()


def test_a_missing_workspace_is_an_error_naming_its_source(
    home: Home, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    missing = tmp_path / "typo" / "workspace"
    result = run_cli("chat", "-m", "hi", "--workspace", str(missing), env=cli_env(home, fake_llm))
    assert result.returncode == 2
    assert result.stderr.startswith("nanomem: config error: agent.workspace:")
    assert str(missing) in result.stderr and "(command line)" in result.stderr
    env = cli_env(home, fake_llm, NANOMEM_AGENT__WORKSPACE=str(missing))
    result = run_cli("gateway", env=env)
    assert result.returncode == 2 and "NANOMEM_AGENT__WORKSPACE" in result.stderr
    assert fake_llm.requests == [] and not missing.exists()
    fake_llm.reply("fine")  # the positive control: the same run with a workspace that exists
    missing.mkdir(parents=True)
    result = run_cli("chat", "-m", "hi", "--workspace", str(missing), env=cli_env(home, fake_llm))
    assert result.returncode == 0 and result.stdout.strip() == "fine", result.stderr


def test_a_missing_workspace_is_created_when_the_person_says_so(
    home: Home, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    missing = tmp_path / "new-workspace"
    env = cli_env(home, fake_llm, TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1")
    child, _ = spawn(env, "chat", "--workspace", str(missing))
    child.expect_exact("does not exist. Create it? [y/N]")
    child.sendline("y")
    child.expect_exact(PROMPT)
    assert (missing / "SOUL.md").is_file()
    child.sendcontrol("d")
    child.expect(pexpect.EOF)


def test_a_refused_key_names_the_variable_it_came_from(home: Home, fake_llm: FakeOpenAI) -> None:
    env = cli_env(home, fake_llm, OPENAI_API_KEY="sk-from-openai-variable")
    del env["NANOMEM_LLM__API_KEY"]
    fake_llm.error(401, "Incorrect API key provided")
    result = run_cli("chat", "-m", "hi", env=env)
    assert result.returncode == 1
    assert "refused the API key" in result.stderr
    assert "the environment variable OPENAI_API_KEY" in result.stderr
    assert fake_llm.auth_headers[0] == "Bearer sk-from-openai-variable"
    assert "sk-from-openai-variable" not in result.stderr


def test_with_telegram_enabled_onboarding_asks_who_the_owner_is(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    # A token set elsewhere is not asked for (nor copied into the file).
    env = bare_env(home, NANOMEM_TELEGRAM__ENABLED="true", NANOMEM_TELEGRAM__TOKEN="1:x")
    child, seen = spawn(env, "onboard")
    child.expect_exact("Model (")
    child.sendline("")  # later
    child.expect_exact("Telegram user id")
    child.sendline("@me")
    child.expect_exact("not a numeric user id")
    child.sendline("4242")
    child.expect_exact(WEB_QUESTION)
    child.sendline("n")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, seen.getvalue()
    written = tomllib.loads(home.config.read_text())["telegram"]
    assert written == {"enabled": True, "owner": 4242}
    assert "Bot token" not in seen.getvalue()


def model_less_home(tmp_path: Path, fake_llm: FakeOpenAI) -> tuple[Home, dict[str, str]]:
    """A home onboarded earlier without a model; the server and its key come from the
    environment, so the model is the only question."""
    home = Home(tmp_path / "home")
    env = bare_env(home, NANOMEM_LLM__API_BASE=fake_llm.base_url, NANOMEM_LLM__API_KEY="sk-t")
    assert run_cli("onboard", env=env, stdin="").returncode == 0
    assert "model" not in llm_table(home)
    return home, env


def test_the_second_run_refuses_what_is_no_model_name_and_saves_a_valid_one(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    home, env = model_less_home(tmp_path, fake_llm)
    child, seen = spawn(env, "chat")
    for stray in ("what model should I use", ""):
        child.expect_exact("Model to use now")
        child.sendline(stray)
        child.expect_exact("is not a model name" if stray else "A model is needed to chat")
        assert "model" not in llm_table(home)  # nothing invalid is saved
    child.expect_exact("Model to use now")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 2 and "nothing was saved" in seen.getvalue()
    assert "Traceback" not in seen.getvalue() and "model" not in llm_table(home)

    child, seen = spawn(env, "chat")
    child.expect_exact("Model to use now")
    child.sendline("ls -la")
    child.expect_exact("`ls -la` is not a model name: a name has no spaces")
    child.expect_exact("Model to use now")
    child.sendline("openai/fake")
    child.expect_exact(PROMPT)
    assert llm_table(home)["model"] == "openai/fake"
    child.sendline("hello")
    child.expect_exact("echo: ")
    child.expect_exact(PROMPT)
    child.sendcontrol("d")
    child.expect(pexpect.EOF)


def test_three_answers_that_are_no_model_end_the_run_and_save_nothing(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    home, env = model_less_home(tmp_path, fake_llm)
    before = home.config.read_bytes()
    child, seen = spawn(env, "chat")
    for stray in ("ls -la", "cd ~/projects", ""):
        child.expect_exact("Model to use now")
        child.sendline(stray)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 2, seen.getvalue()
    assert "no model configured; nothing was saved" in seen.getvalue()
    assert home.config.read_bytes() == before
