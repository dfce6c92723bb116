"""`nanomem doctor` against real components: the loopback model (answering, refused, a wrong
model, silent, or not there at all), the loopback Bot API, an SDK-built MCP server, a real
gateway on the home; a broken config and a loose home. One line per check, exit 1 on a failure,
never a secret."""

from __future__ import annotations

import json
import re
import socket
import sys
from pathlib import Path

import pytest

from nanomem.home import Home
from tests.conftest import TEST_KEY, cli_env, run_cli, run_cli_here
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import wait_until
from tests.helpers.gateway import API_KEY, GatewayProcess

SERVER = str(Path(__file__).parent / "fakes" / "mcp_server.py")


def lines(text: str) -> dict[str, str]:
    """The doctor's lines by check name: the mark, then what follows the name."""
    found: dict[str, str] = {}
    for match in re.finditer(r"^([✓!✗]) (\S+(?: \S+)?) {2,}(.*)$", text, re.M):
        found[match.group(2)] = f"{match.group(1)} {match.group(3)}"
    return found


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_everything_fine_beside_a_running_gateway(home: Home) -> None:
    servers = {"fake": {"command": sys.executable, "args": [SERVER], "timeout_s": 30}}
    env = {
        "NANOMEM_MCP__SERVERS": json.dumps(servers),
        "NANOMEM_API__ENABLED": "true",
        "NANOMEM_API__KEYS": json.dumps([API_KEY]),
        "NANOMEM_TOOLS__SHELL_ENABLED": "true",
    }
    with (
        FakeTelegram() as telegram,
        FakeOpenAI() as llm,
        GatewayProcess(home, telegram, llm, **env) as gateway,
    ):
        wait_until(lambda: gateway.health()[1]["mcp"]["fake"]["state"] == "ready")
        asked = len(llm.requests)
        done = run_cli("doctor", env=gateway.env)  # the real command, in its own process
        shown = lines(done.stdout)
        assert done.returncode == 0, done.stdout + done.stderr
        assert shown["model"].startswith("✓ openai/fake via lean client, key ***6789")
        assert f"{llm.base_url}/chat/completions answered" in shown["model"]
        assert llm.requests[asked]["max_tokens"] == 1  # one token, not a turn
        assert shown["telegram"].startswith("✓ bot @nanomem_test_bot")
        assert shown["mcp fake"] == f"✓ stdio: {sys.executable}: started, 13 tools listed"
        assert shown["agent api"] == "✓ 1 key(s): ***6789"
        health = f"http://127.0.0.1:{gateway.port}/health answers 200"
        assert shown["gateway"] == f"✓ pid {gateway.proc.pid}: {health}"
        for name in ("versions", "home", "disk", "config", "sandbox"):
            assert shown[name][0] in "✓!", done.stdout
        assert TEST_KEY not in done.stdout and telegram.token not in done.stdout
        assert API_KEY not in done.stdout
        telegram.set_token_valid(False)  # the bot's token revoked while the gateway runs
        telegram.send_text(1000, "wakes the long poll")
        wait_until(lambda: gateway.health()[0] == 503, what="/health to report it")
        again = run_cli_here("doctor", env=gateway.env)
        shown = lines(again.stdout)
        assert again.returncode == 1
        unhealthy = f"✗ pid {gateway.proc.pid}: http://127.0.0.1:{gateway.port}/health answers 503"
        assert shown["gateway"].startswith(f"{unhealthy} (telegram down)")
        assert "Telegram refused the token (401)" in shown["telegram"]
        telegram.set_token_valid(True)
        wait_until(lambda: gateway.health()[0] == 200, what="polling to recover")


def test_an_unreachable_model_names_the_url_tried(home: Home) -> None:
    base = f"http://127.0.0.1:{closed_port()}/v1"
    env = cli_env(home, NANOMEM_LLM__MODEL="openai/fake", NANOMEM_LLM__API_BASE=base)
    assert "the log is" not in run_cli_here("doctor", env=env).stdout  # none written yet
    home.logs.mkdir(exist_ok=True)
    (home.logs / "nanomem.log").write_text("an earlier chat's log\n")
    done = run_cli_here("doctor", env=env)
    assert done.returncode == 1
    model = lines(done.stdout)["model"]
    assert model.startswith(f"✗ openai/fake via lean client, key none: could not reach {base}")
    assert "→ check the server runs, or nanomem config set llm.api_base" in model
    assert f"the log is {home.logs}/nanomem.log" in done.stdout


def test_the_default_base_is_named_when_none_is_set(home: Home) -> None:
    env = cli_env(home, NANOMEM_LLM__MODEL="openai/gpt-4o-mini")
    env.pop("OPENAI_API_KEY", None)
    model = lines(run_cli_here("doctor", env=env).stdout)["model"]
    assert "https://api.openai.com/v1/chat/completions needs an API key" in model
    assert "→ nanomem config set llm.api_key <key>" in model


@pytest.mark.parametrize(
    ("status", "said", "fix"),
    [
        (401, "refused the key", "nanomem config set llm.api_key <key>"),
        (404, "does not know the model openai/fake", "nanomem config set llm.model"),
    ],
)
def test_a_refused_key_and_an_unknown_model(home: Home, status: int, said: str, fix: str) -> None:
    with FakeOpenAI() as llm:
        llm.error(status, f"scripted {status} for {TEST_KEY}")
        done = run_cli_here("doctor", env=cli_env(home, llm))
    model = lines(done.stdout)["model"]
    assert done.returncode == 1
    assert model.startswith("✗ openai/fake via lean client, key ***6789")
    assert f"{llm.base_url}/chat/completions {said}" in model and f"→ {fix}" in model
    assert TEST_KEY not in done.stdout  # echoed back by the server: masked


def test_a_silent_model_times_out_within_its_bound(home: Home) -> None:
    with FakeOpenAI() as llm:
        llm.hang(30)
        done = run_cli_here("doctor", env=cli_env(home, llm, NANOMEM_LLM__TIMEOUT_S="1"))
    model = lines(done.stdout)["model"]
    assert f"no answer from {llm.base_url}/chat/completions within 1 s" in model
    assert done.returncode == 1


def test_telegram_refusing_the_token(home: Home) -> None:
    with FakeTelegram() as telegram, FakeOpenAI() as llm:
        telegram.set_token_valid(False)
        env = cli_env(
            home,
            llm,
            NANOMEM_TELEGRAM__ENABLED="true",
            NANOMEM_TELEGRAM__TOKEN=telegram.token,
            NANOMEM_TELEGRAM__BASE_URL=telegram.base_url,
            NANOMEM_TELEGRAM__OWNER="4242",
        )
        done = run_cli_here("doctor", env=env)
    line = lines(done.stdout)["telegram"]
    assert line.startswith("✗ ") and "Telegram refused the token (401)" in line
    assert "/bot***" in line and telegram.token not in done.stdout
    assert "→ nanomem config set telegram.token" in line
    assert done.returncode == 1


def test_an_mcp_server_whose_program_is_missing(home: Home) -> None:
    servers = {"files": {"command": "no-such-npx-here", "args": ["-y", "x"]}}
    with FakeOpenAI() as llm:
        env = cli_env(home, llm, NANOMEM_MCP__SERVERS=json.dumps(servers))
        done = run_cli_here("doctor", env=env)
    line = lines(done.stdout)["mcp files"]
    assert line.startswith("✗ stdio: no-such-npx-here: command not found")
    assert "→ install no-such-npx-here (Node.js for npx" in line
    assert done.returncode == 1


def test_a_broken_config_names_file_and_line_and_the_rest_still_runs(home: Home) -> None:
    home.config.write_text('[llm]\nmodel = "openai/x"\n[llm]\n', encoding="utf-8")
    done = run_cli_here("doctor", env=cli_env(home))
    shown = lines(done.stdout)
    assert done.returncode == 1
    assert shown["config"].startswith("✗ ") and str(home.config) in shown["config"]
    assert "declares [llm] twice (lines 1 and 3)" in shown["config"]
    assert shown["versions"].startswith("✓ Python") and shown["disk"][0] in "✓!"
    assert "Traceback" not in done.stdout + done.stderr


def test_a_home_others_can_read(home: Home) -> None:
    home.root.chmod(0o755)
    home.config.chmod(0o644)
    with FakeOpenAI() as llm:
        done = run_cli_here("doctor", env=cli_env(home, llm))
    line = lines(done.stdout)["home"]
    assert line.startswith(f"✗ {home.root} is 755 (others may read it)")
    assert f"chmod 700 {home.root}; chmod 600 {home.config}" in line
    assert done.returncode == 1


def test_what_chat_would_stop_on_is_a_config_failure(home: Home, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-workspace"
    with FakeOpenAI() as llm:
        env = cli_env(home, llm, NANOMEM_AGENT__WORKSPACE=str(missing))
        done = run_cli_here("doctor", env=env)
    line = lines(done.stdout)["config"]
    assert line.startswith(f"✗ config error: agent.workspace: the folder {missing} does not exist")
    assert "(environment variable NANOMEM_AGENT__WORKSPACE)" in line
    assert not missing.exists() and done.returncode == 1  # the doctor changes nothing


@pytest.mark.parametrize("made", [True, False], ids=["empty-folder", "no-folder"])
def test_a_folder_that_is_not_a_home_is_named_so_and_left_as_it_was(
    home: Home, tmp_path: Path, made: bool
) -> None:
    typo = tmp_path / "nanomme"
    if made:
        typo.mkdir(mode=0o755)
    done = run_cli("--home", str(typo), "doctor", env=cli_env(home))  # a typo beside a home
    assert done.returncode == 1, done.stderr
    assert lines(done.stdout) == {
        "home": f"✗ {typo} is not a nanomem home (no config.toml, no workspace) → "
        f"`nanomem onboard --home {typo}`, or check --home / NANOMEM_HOME"
    }
    assert "chmod" not in done.stdout and "nanomem.log" not in done.stdout
    assert "Traceback" not in done.stderr
    assert (sorted(typo.iterdir()) == []) if made else not typo.exists()
