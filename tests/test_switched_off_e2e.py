"""A command of a feature that is off (/mcp with no server, /allowed and /disallow with the
shell off) says what is off and the one `nanomem config set` line that turns it on, not
"Unknown command"; with the feature on, the feature answers."""

from __future__ import annotations

import json

import pytest

from nanomem.home import Home
from tests.conftest import cli_env, run_cli_here
from tests.fakes.openai_server import FakeOpenAI

RESTART = "then restart the gateway (or the chat)."


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (
            "/mcp",
            "No MCP server is configured, so /mcp has nothing to do. To turn it on: "
            "`nanomem config set mcp.servers.NAME.command PROGRAM`",
        ),
        (
            "/allowed",
            "The shell is off, so /allowed has nothing to do. To turn it on: "
            "`nanomem config set tools.shell_enabled true`",
        ),
        ("/disallow ls", "The shell is off, so /disallow has nothing to do."),
    ],
)
def test_an_off_features_command_says_how_to_turn_it_on(
    home: Home, fake_llm: FakeOpenAI, command: str, said: str
) -> None:
    done = run_cli_here("chat", "-m", command, env=cli_env(home, fake_llm))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(said) and RESTART in done.stdout
    assert "Unknown command" not in done.stdout + done.stderr
    assert fake_llm.requests == []  # a command: the model is never asked


def test_with_the_feature_on_the_feature_answers(home: Home, fake_llm: FakeOpenAI) -> None:
    env = cli_env(home, fake_llm, NANOMEM_TOOLS__SHELL_ENABLED="true")
    done = run_cli_here("chat", "-m", "/allowed", env=env)
    assert done.returncode == 0 and "The shell is off" not in done.stdout
    servers = {"off": {"command": "x", "enabled": False}}
    env = cli_env(home, fake_llm, NANOMEM_MCP__SERVERS=json.dumps(servers))
    done = run_cli_here("chat", "-m", "/mcp", env=env)
    assert done.stdout.startswith("MCP servers:") and "- off (stdio: x): disabled" in done.stdout


def test_the_fallbacks_are_not_in_help(home: Home, fake_llm: FakeOpenAI) -> None:
    shown = run_cli_here("chat", "-m", "/help", env=cli_env(home, fake_llm)).stdout
    assert "/allowed" not in shown and "/mcp" not in shown
    unknown = run_cli_here("chat", "-m", "/bogus", env=cli_env(home, fake_llm))
    assert "Unknown command /bogus" in unknown.stderr  # other names stay unknown
