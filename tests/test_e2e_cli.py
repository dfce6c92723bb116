"""The `nanomem` command talking to the loopback model (the lean client by default for an
api_base; litellm where a test says so): in this process through `nanomem.cli.main.main`, and in a
subprocess (the slow tier) where only a process can show it: its own exit, streams, environment."""

import json
import os
import stat
import subprocess
from pathlib import Path

from nanomem.home import Home, shown_path
from nanomem.memory.session import session_filename
from tests.conftest import NANOMEM, TEST_KEY, cli_env, run_cli, run_cli_here
from tests.fakes.openai_server import FakeOpenAI


def session_lines(home: Home, key: str = "cli:direct") -> list[dict]:
    path = home.sessions / session_filename(key)
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_one_shot_chat(home: Home, fake_llm: FakeOpenAI) -> None:
    fake_llm.reply("Hello from the model")
    result = run_cli_here("chat", "-m", "hi there", env=cli_env(home, fake_llm))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Hello from the model\n"
    request = fake_llm.requests[0]
    assert request["model"] == "fake"
    assert request["messages"][0]["role"] == "system"
    assert request["messages"][-1]["content"].endswith("hi there")
    assert {t["function"]["name"] for t in request["tools"]} >= {"read_file", "edit_file"}
    assert fake_llm.auth_headers[0] == f"Bearer {TEST_KEY}"


def test_tool_call_round_trip(home: Home, fake_llm: FakeOpenAI) -> None:
    # Through litellm on purpose: a litellm bump that breaks real tool calls must fail here.
    fake_llm.tool_call("write_file", {"path": "todo.md", "content": "- call mum"})
    fake_llm.reply("Added to todo.md")
    env = cli_env(home, fake_llm, NANOMEM_LLM__TRANSPORT="litellm")
    result = run_cli_here("chat", "-m", "add 'call mum' to my todo", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Added to todo.md"
    assert (home.workspace / "todo.md").read_text() == "- call mum"
    followup = fake_llm.requests[1]["messages"]
    assert followup[-1]["role"] == "tool" and followup[-1]["content"].startswith("Wrote 10")
    assert followup[-2]["tool_calls"][0]["function"]["name"] == "write_file"


def test_a_sent_file_is_named_on_stdout(home: Home, fake_llm: FakeOpenAI) -> None:
    (home.workspace / "plan.csv").write_text("basil,18:00\n")
    fake_llm.tool_call("send_file", {"path": "plan.csv", "caption": "the plan"})
    fake_llm.reply("It is above.")
    result = run_cli("chat", "-m", "send me the plan", env=cli_env(home, fake_llm))
    assert result.returncode == 0, result.stderr
    assert f"📎 {home.workspace / 'plan.csv'}\nthe plan\n" in result.stdout
    assert result.stdout.rstrip().endswith("It is above.")


def test_path_traversal_is_refused(home: Home, fake_llm: FakeOpenAI) -> None:
    fake_llm.tool_call("read_file", {"path": "../config.toml"})
    fake_llm.reply("I can't read that.")
    result = run_cli_here("chat", "-m", "show me your config", env=cli_env(home, fake_llm))
    assert result.returncode == 0, result.stderr
    observation = fake_llm.requests[1]["messages"][-1]["content"]
    assert observation.startswith("Error:") and "'..'" in observation
    assert "[llm]" not in observation


def test_retries_on_429_and_500_then_succeeds(home: Home, fake_llm: FakeOpenAI) -> None:
    fake_llm.error(429, "slow down", retry_after=0.1)
    fake_llm.error(500, "oops")
    fake_llm.reply("third time lucky")
    result = run_cli_here("chat", "-m", "hi", env=cli_env(home, fake_llm))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "third time lucky"
    assert len(fake_llm.requests) == 3


def test_permanent_failure_gives_a_short_message_and_a_consistent_session(
    home: Home, fake_llm: FakeOpenAI
) -> None:
    for _ in range(4):
        fake_llm.error(503, '{"internal": "stack trace here"}')
    env = cli_env(home, fake_llm, NANOMEM_LLM__MAX_RETRIES="1")
    result = run_cli_here("chat", "-m", "hi", env=env)
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    log = shown_path(home.logs / "nanomem.log")
    assert lines == [
        "nanomem: The model service had an internal error. Send /retry to try again shortly; "
        f"the details are in {log}."
    ]
    assert len(fake_llm.requests) == 2
    saved = session_lines(home)[1:]
    assert [r.get("role") for r in saved] == ["user", "assistant"]  # the user's words are kept
    assert saved[1]["failed"] == "server" and "stack trace" not in saved[1]["content"]
    fake_llm.reply("back again")
    second = run_cli_here("chat", "-m", "are you there?", env=cli_env(home, fake_llm))
    assert second.stdout.strip() == "back again"
    sent = fake_llm.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert "no reply was given" in sent[2]["content"]  # honest: the first got no answer


def test_unreachable_model_is_named(home: Home) -> None:
    env = cli_env(
        home,
        None,
        NANOMEM_LLM__MODEL="openai/fake",
        NANOMEM_LLM__API_KEY="sk-x",
        NANOMEM_LLM__API_BASE="http://127.0.0.1:9/v1",
        NANOMEM_LLM__MAX_RETRIES="0",
    )
    result = run_cli_here("chat", "-m", "hi", env=env)
    assert result.returncode == 1
    assert result.stderr.strip().startswith(
        "nanomem: I could not reach the model service at http://127.0.0.1:9/v1. Check the "
        "network or `llm.api_base`. Send /retry to try again; `nanomem doctor` checks the "
        "connection; the details are in "
    )


def test_session_is_persisted_and_reloaded_by_a_second_process(
    home: Home, fake_llm: FakeOpenAI
) -> None:
    fake_llm.reply("Nice to meet you, Ada.")
    run_cli("chat", "-m", "my name is Ada", env=cli_env(home, fake_llm))
    fake_llm.reply("You are Ada.")
    result = run_cli("chat", "-m", "who am I?", env=cli_env(home, fake_llm))
    assert result.stdout.strip() == "You are Ada."
    replayed = fake_llm.requests[1]["messages"]
    assert [m["role"] for m in replayed] == ["system", "user", "assistant", "user"]
    assert replayed[1]["content"].endswith("my name is Ada")
    assert replayed[1] == fake_llm.requests[0]["messages"][1]
    assert replayed[0] == fake_llm.requests[0]["messages"][0]


def test_named_sessions_are_separate(home: Home, fake_llm: FakeOpenAI) -> None:
    run_cli_here("chat", "-m", "in work", "--session", "work", env=cli_env(home, fake_llm))
    run_cli_here("chat", "-m", "in default", env=cli_env(home, fake_llm))
    assert [m["role"] for m in fake_llm.requests[1]["messages"]] == ["system", "user"]
    assert (home.sessions / session_filename("cli:work")).exists()


def test_commands_through_the_cli(home: Home, fake_llm: FakeOpenAI) -> None:
    env = cli_env(home, fake_llm)
    unknown = run_cli_here("chat", "-m", "/bogus", env=env)
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == "nanomem: Unknown command /bogus — try /help."
    helped = run_cli_here("chat", "-m", "/help", env=env)
    assert "/new" in helped.stdout and "/stop" in helped.stdout
    run_cli_here("chat", "-m", "remember this", env=env)
    fake_llm.reply("- 2026-11-22: the user asked me to remember this")
    assert run_cli_here("chat", "-m", "/new", env=env).stdout.startswith("New session started.")
    run_cli_here("chat", "-m", "fresh", env=env)
    assert len(fake_llm.requests) == 3  # the first turn, /new's summary, the fresh turn
    assert [m["role"] for m in fake_llm.requests[-1]["messages"]] == ["system", "user"]


def test_message_from_stdin(home: Home, fake_llm: FakeOpenAI) -> None:
    result = run_cli_here(
        "chat", "-m", "-", env=cli_env(home, fake_llm), stdin="line one\nline two"
    )
    assert result.returncode == 0
    assert fake_llm.requests[0]["messages"][-1]["content"].endswith("line one\nline two")


def test_piped_stdin_without_m_is_the_one_message(home: Home, fake_llm: FakeOpenAI) -> None:
    fake_llm.reply("Hello, pipe")
    result = run_cli("chat", env=cli_env(home, fake_llm), stdin="hi from a pipe\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Hello, pipe\n" and result.stderr == ""
    assert fake_llm.requests[0]["messages"][-1]["content"].rstrip().endswith("hi from a pipe")
    for _ in range(2):
        fake_llm.error(503, "down")
    env = cli_env(home, fake_llm, NANOMEM_LLM__MAX_RETRIES="1")
    failed = run_cli("chat", env=env, stdin="and now?")
    assert failed.returncode == 1 and failed.stdout == ""
    assert failed.stderr.startswith("nanomem: ") and len(failed.stderr.splitlines()) == 1


def test_empty_piped_stdin_is_a_clear_error(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    home = Home(tmp_path / "untouched")
    result = run_cli("chat", env=cli_env(home, fake_llm), stdin="")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == (
        "nanomem: nothing to send: stdin was empty (pipe a message in, or use -m TEXT)\n"
    )
    assert fake_llm.requests == [] and not home.root.exists()  # nothing was set up


def test_version_is_printed_and_shown_by_status(home: Home, fake_llm: FakeOpenAI) -> None:
    from importlib.metadata import version

    printed = run_cli("--version", env=cli_env(home))
    assert printed.returncode == 0 and printed.stdout == f"nanomem {version('nanomem')}\n"
    status = run_cli("status", env=cli_env(home, fake_llm))
    assert f"version         {version('nanomem')}" in status.stdout.splitlines()


def test_no_model_configured_says_what_to_set(tmp_path: Path) -> None:
    home = Home(tmp_path / "fresh")
    result = run_cli_here("chat", "-m", "hi", env=cli_env(home))
    assert result.returncode == 2
    assert "llm.model" in result.stderr and "NANOMEM_LLM__MODEL" in result.stderr
    assert "Traceback" not in result.stderr
    assert home.config.exists()  # chat onboarded the missing home first


def test_bad_config_exits_2_naming_key_and_source(home: Home) -> None:
    home.config.write_text(
        home.config.read_text().replace("# max_tokens = 4096", "max_tokens = 'lots'", 1)
    )
    result = run_cli_here("chat", "-m", "hi", env=cli_env(home))
    assert result.returncode == 2
    error, hint = result.stderr.splitlines()  # the error, and where to look next
    assert hint == "nanomem: `nanomem doctor` checks the whole setup and says how to fix what fails"
    assert "llm.max_tokens: Input should be a valid integer" in error
    assert "lots" not in result.stderr  # values are never echoed: a typo'd key may be a secret
    assert f"{home.config}, line" in result.stderr
    env_result = run_cli_here(
        "status", env=cli_env(home, None, NANOMEM_TOOLS__SHELL_ENABLED="perhaps")
    )
    assert env_result.returncode == 2
    assert "environment variable NANOMEM_TOOLS__SHELL_ENABLED" in env_result.stderr


def test_malformed_toml_exits_2(home: Home) -> None:
    home.config.write_text("[llm\nmodel = 1\n")
    result = run_cli_here("status", env=cli_env(home))
    assert result.returncode == 2
    assert "malformed TOML" in result.stderr and "line 1" in result.stderr
    assert "Traceback" not in result.stderr


def test_named_config_file_must_exist(home: Home) -> None:
    result = run_cli_here("--config", "/nonexistent/nanomem.toml", "status", env=cli_env(home))
    assert result.returncode == 2
    assert "/nonexistent/nanomem.toml does not exist" in result.stderr


def test_status_never_prints_the_key(home: Home, fake_llm: FakeOpenAI) -> None:
    run_cli_here("chat", "-m", "hi", env=cli_env(home, fake_llm))
    before = len(fake_llm.requests)
    result = run_cli_here("status", env=cli_env(home, fake_llm))
    assert result.returncode == 0
    assert TEST_KEY not in result.stdout
    assert "api key" in result.stdout and "set" in result.stdout
    assert "openai/fake" in result.stdout
    assert "sessions        1" in result.stdout or " 1\n" in result.stdout
    assert len(fake_llm.requests) == before  # status does not call the model


def test_onboard_is_idempotent_private_and_keeps_edits(tmp_path: Path) -> None:
    home = Home(tmp_path / "h")
    env = cli_env(home)
    first = run_cli_here("onboard", env=env)
    assert first.returncode == 0 and "created" in first.stdout
    assert stat.S_IMODE(home.config.stat().st_mode) == 0o600
    for name in ("SOUL.md", "USER.md", "AGENTS.md", "memory/MEMORY.md", "skills/remember/SKILL.md"):
        assert (home.workspace / name).is_file(), name
    assert home.sessions.is_dir() and home.logs.is_dir()
    (home.workspace / "USER.md").write_text("# User\n- my own words\n")
    (home.workspace / "SOUL.md").unlink()
    second = run_cli_here("onboard", env=env)
    assert second.returncode == 0
    assert (home.workspace / "USER.md").read_text() == "# User\n- my own words\n"
    assert (home.workspace / "SOUL.md").exists()  # a missing file is restored
    assert "created" in second.stdout and "config.toml" not in second.stdout


def test_secrets_never_reach_logs(home: Home, fake_llm: FakeOpenAI) -> None:
    fake_llm.error(401, f"Incorrect API key provided: {TEST_KEY}")
    env = cli_env(home, fake_llm, NANOMEM_LOG__LEVEL="DEBUG")
    result = run_cli_here("chat", "-m", "hi", "--log-level", "DEBUG", env=env)
    assert result.returncode == 1
    log_text = (home.logs / "nanomem.log").read_text()
    assert "auth" in log_text  # the failure itself is logged...
    assert TEST_KEY not in log_text and TEST_KEY not in result.stderr  # ...the key is not
    assert "***" in log_text


def test_no_traceback_for_an_unwritable_home(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        blocker = tmp_path / "file"
        blocker.write_text("x")
        home = Home(blocker / "home")  # a path under a regular file cannot be created
    else:
        home = Home(Path("/proc/nanomem-home"))
    result = run_cli("chat", "-m", "hi", env=cli_env(home))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("nanomem:")


def test_missing_api_key_is_reported_as_an_auth_problem(home: Home, fake_llm: FakeOpenAI) -> None:
    env = cli_env(home, fake_llm)
    del env["NANOMEM_LLM__API_KEY"], env["NANOMEM_LLM__API_BASE"]  # OpenAI itself, no key
    env.pop("OPENAI_API_KEY", None)
    result = run_cli_here("chat", "-m", "hi", env=env)
    assert result.returncode == 1
    assert "https://api.openai.com/v1 needs an API key, and no key is set" in result.stderr


def test_a_local_server_needs_no_key(home: Home, fake_llm: FakeOpenAI) -> None:
    env = cli_env(home, fake_llm)
    del env["NANOMEM_LLM__API_KEY"]
    env.pop("OPENAI_API_KEY", None)
    fake_llm.reply("no key needed")
    result = run_cli_here("chat", "-m", "hi", env=env)
    assert result.stdout.strip() == "no key needed", result.stderr


def test_the_direct_transport_does_a_tool_round_trip(home: Home, fake_llm: FakeOpenAI) -> None:
    fake_llm.tool_call("write_file", {"path": "direct.md", "content": "fast"})
    fake_llm.reply("Done without litellm.")
    env = cli_env(home, fake_llm, NANOMEM_LLM__TRANSPORT="direct")
    result = run_cli("chat", "-m", "write it", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Done without litellm."
    assert result.stderr == ""  # the HTTP session was closed: no "Unclosed" warnings
    assert (home.workspace / "direct.md").read_text() == "fast"
    assert fake_llm.requests[0]["model"] == "fake"
    assert fake_llm.auth_headers[0] == f"Bearer {TEST_KEY}"


def test_commands_the_agent_runs_keep_a_normal_environment(
    home: Home, fake_llm: FakeOpenAI
) -> None:
    # nanomem keeps loguru quiet until its logging is set up; that switch must not leak into
    # the commands the agent runs (their own loguru would lose its output).
    fake_llm.tool_call("exec", {"command": 'echo "switch=${LOGURU_AUTOINIT:-unset}"'})
    fake_llm.reply("done")
    env = {**cli_env(home, fake_llm), "NANOMEM_TOOLS__SHELL_ENABLED": "true"}
    env["NANOMEM_TOOLS__SHELL_APPROVAL"] = "off"  # the environment is tested, not approval
    env.pop("LOGURU_AUTOINIT", None)
    result = run_cli("chat", "-m", "run it", env=env)
    assert result.returncode == 0, result.stderr
    observation = fake_llm.requests[1]["messages"][-1]["content"]
    assert observation.startswith("exit code 0") and "switch=unset" in observation


def test_one_shot_can_continue_another_channels_session(home: Home, fake_llm: FakeOpenAI) -> None:
    fake_llm.reply("Hello again")
    env = cli_env(home, fake_llm)
    result = run_cli_here("chat", "-m", "from the shell", "--session", "telegram:42", env=env)
    assert result.returncode == 0, result.stderr
    lines = session_lines(home, "telegram:42")
    assert lines[0]["key"] == "telegram:42" and "channel telegram" in lines[1]["content"]
    assert not (home.sessions / session_filename("cli:telegram:42")).exists()
    # (a whole key is refused for an interactive chat: see test_e2e_terminal)


def test_eight_edits_of_one_file_in_one_step_are_all_kept(home: Home, fake_llm: FakeOpenAI) -> None:
    (home.workspace / "list.md").write_text("".join(f"item {i}: todo\n" for i in range(8)))
    fake_llm.tool_calls(
        [
            (
                "edit_file",
                {"path": "list.md", "old_text": f"item {i}: todo", "new_text": f"item {i}: done"},
            )
            for i in range(8)
        ]
    )
    fake_llm.reply("all eight done")
    result = run_cli_here("chat", "-m", "tick everything off", env=cli_env(home, fake_llm))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "all eight done\n"
    assert (home.workspace / "list.md").read_text() == "".join(
        f"item {i}: done\n" for i in range(8)
    )
    results = [m for m in fake_llm.requests[1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in results] == ["Edited list.md"] * 8


def test_one_shot_writes_the_reply_as_it_arrives(home: Home, fake_llm: FakeOpenAI) -> None:
    story = " ".join(f"Sentence number {n} of a long streamed answer." for n in range(12))
    fake_llm.reply(story, pieces=12, hold_after=6)  # half of it, then the model waits
    process = subprocess.Popen(
        [*NANOMEM, "chat", "-m", "tell me a story"],
        env=cli_env(home, fake_llm),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    early = b""
    while b"Sentence number 1 " not in early:  # arrives while the model holds the rest
        chunk = process.stdout.read1(4096)
        assert chunk, "stdout ended before the text arrived"
        early += chunk
    assert early.startswith(b"Sentence number 0") and process.poll() is None
    fake_llm.release()
    rest, _ = process.communicate(timeout=60)
    assert process.returncode == 0
    assert (early + rest).decode() == story + "\n"  # no duplicate, nothing missing
