"""`nanomem status` beside a real gateway: the MCP servers as that gateway runs them (one
configured after it started is said to need a restart, not "not running"), the Telegram line,
and `--home` after the command. Real processes: slow tier."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from nanomem.home import Home
from tests.conftest import cli_env, run_cli_here
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import wait_until
from tests.helpers.gateway import GatewayProcess

SERVER = str(Path(__file__).parent / "fakes" / "mcp_server.py")
SERVERS = json.dumps({"fake": {"command": sys.executable, "args": [SERVER], "timeout_s": 30}})


def rows(text: str) -> dict[str, str]:
    """Status's rows by name (the first of each name; a name's further lines are left out)."""
    found: dict[str, str] = {}
    for match in re.finditer(r"^(\S.*?) {2,}(.*)$", text, re.M):
        found.setdefault(match.group(1), match.group(2))
    return found


@pytest.mark.slow
def test_status_shows_the_running_gateways_mcp_servers(home: Home) -> None:
    with FakeTelegram() as telegram, FakeOpenAI() as llm:
        with GatewayProcess(home, telegram, llm, NANOMEM_MCP__SERVERS=SERVERS) as gateway:
            wait_until(lambda: gateway.health()[1]["mcp"]["fake"]["state"] == "ready")
            # The person's shell no longer names the server: the gateway still runs it.
            shown = run_cli_here("status", env=cli_env(home))
            assert shown.returncode == 0, shown.stderr
            line = rows(shown.stdout)["mcp fake"]
            assert line.startswith(f"ready, 13 tools (gateway, pid {gateway.proc.pid})")
            assert "no longer in the config: restart the gateway" in line
        # Started without it, then configured: the gateway never started it.
        with GatewayProcess(home, telegram, llm) as gateway:
            env = cli_env(home, NANOMEM_MCP__SERVERS=SERVERS)
            shown = run_cli_here("status", env=env)
            running = f"running (pid {gateway.proc.pid}, port {gateway.port})"
            assert rows(shown.stdout)["gateway"] == running
            line = rows(shown.stdout)["mcp fake"]
            assert line.startswith(f"not started by the gateway (pid {gateway.proc.pid})")
            assert "Restart the gateway" in line
        shown = run_cli_here("status", env=env)
        assert rows(shown.stdout)["mcp fake"].startswith("not running")


def test_status_says_how_telegram_is_set_up(home: Home) -> None:
    env = cli_env(home, NANOMEM_TELEGRAM__ENABLED="true", NANOMEM_TELEGRAM__ALLOW_FROM="[4242, 77]")
    line = rows(run_cli_here("status", env=env).stdout)["telegram"]
    assert line.startswith("token missing (telegram.token / NANOMEM_TELEGRAM__TOKEN)")
    assert "owner 4242" in line and "2 users in allow_from" in line and "polling" in line
    token = "123456:secret-token-abcdefWXYZ"
    env["NANOMEM_TELEGRAM__TOKEN"] = token
    shown = run_cli_here("status", env=env).stdout
    assert rows(shown)["telegram"].startswith("token set (***WXYZ)")
    assert "secret-token" not in shown
    assert "telegram" not in rows(run_cli_here("status", env=cli_env(home)).stdout)


def test_status_never_calls_the_model_and_says_what_does(home: Home) -> None:
    with FakeOpenAI() as llm:
        shown = run_cli_here("status", env=cli_env(home, llm))
        assert llm.requests == []
    assert "`nanomem doctor` checks the model answers" in rows(shown.stdout)["model answers"]


def test_home_and_config_go_before_or_after_the_command(home: Home, tmp_path: Path) -> None:
    env = cli_env(home, NANOMEM_HOME=str(tmp_path / "elsewhere"))
    for args in (("status", "--home", str(home.root)), ("--home", str(home.root), "status")):
        shown = run_cli_here(*args, env=env)
        assert shown.returncode == 0, shown.stderr
        assert rows(shown.stdout)["home"] == str(home.root)
    after = run_cli_here("status", "--config", str(home.config), env=env)
    assert rows(after.stdout)["config"] == str(home.config)
    # Both given: the one after the command counts.
    both = run_cli_here("--home", str(tmp_path / "x"), "status", "--home", str(home.root), env=env)
    assert rows(both.stdout)["home"] == str(home.root)
    nested = run_cli_here("memory", "log", "--home", str(home.root), env=env)
    assert nested.returncode == 0 and "initial memory" in nested.stdout
