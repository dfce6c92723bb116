"""`nanomem doctor` and `nanomem status` for the Discord channel: the bot's token asked "who am
I" against the loopback Discord, refused or accepted, and never shown."""

from __future__ import annotations

import re

from nanomem.home import Home
from tests.conftest import cli_env, run_cli_here
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.openai_server import FakeOpenAI

OWNER = "200000000000000001"


def lines(text: str) -> dict[str, str]:
    """The doctor's or status's lines by name: what follows the name."""
    found: dict[str, str] = {}
    for match in re.finditer(r"^(?:[✓!✗] )?(\S+(?: \S+)?) {2,}(.*)$", text, re.M):
        found[match.group(1)] = match.group(2)
    return found


def test_doctor_names_the_bot_or_the_refused_token(home: Home) -> None:
    with FakeDiscord() as discord, FakeOpenAI() as llm:
        env = cli_env(
            home,
            llm,
            NANOMEM_DISCORD__ENABLED="true",
            NANOMEM_DISCORD__TOKEN=discord.token,
            NANOMEM_DISCORD__API_BASE=discord.api_base,
            NANOMEM_DISCORD__OWNER=OWNER,
        )
        fine = run_cli_here("doctor", env=env)
        assert "✓ discord" in fine.stdout
        assert lines(fine.stdout)["discord"].startswith("bot nanomem (http://127.0.0.1:")
        assert f"owner {OWNER}" in lines(fine.stdout)["discord"]

        env["NANOMEM_DISCORD__TOKEN"] = "a-revoked-token-with-its-end-WXYZ"
        refused = run_cli_here("doctor", env=env)
    line = lines(refused.stdout)["discord"]
    assert "✗ discord" in refused.stdout and "Discord refused the token (401)" in line
    assert "***WXYZ" in line and "a-revoked-token" not in refused.stdout
    assert "→ nanomem config set discord.token" in line
    assert refused.returncode == 1


def test_status_says_how_discord_is_set_up(home: Home) -> None:
    env = cli_env(
        home, NANOMEM_DISCORD__ENABLED="true", NANOMEM_DISCORD__ALLOW_FROM='["200000000000000002"]'
    )
    line = lines(run_cli_here("status", env=env).stdout)["discord"]
    assert line == "token missing (discord.token), no owner (discord.owner), 1 user in allow_from"
    env |= {"NANOMEM_DISCORD__TOKEN": "a-secret-bot-token-ABCD", "NANOMEM_DISCORD__OWNER": OWNER}
    shown = run_cli_here("status", env=env).stdout
    assert lines(shown)["discord"].startswith(f"token set (***ABCD), owner {OWNER}")
    assert "a-secret-bot-token" not in shown
    assert "discord" not in lines(run_cli_here("status", env=cli_env(home)).stdout)
