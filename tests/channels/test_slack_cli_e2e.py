"""`nanomem doctor` and `nanomem status` for Slack: the real CLI against the loopback Slack;
the tokens are shown masked, never whole."""

from __future__ import annotations

import re

import pytest

from nanomem.home import Home
from tests.conftest import cli_env, run_cli
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_server import APP_TOKEN, BOT_TOKEN
from tests.helpers.gateway import onboarded
from tests.helpers.slack import OWNER, slack_env, slack_fake

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Home:
    return onboarded(tmp_path_factory, "slack-cli")


def slack_line(text: str) -> str:
    found = re.search(r"^(?:[✓!✗] )?slack\s{2,}(.*)$", text, re.M)
    assert found is not None, text
    return found.group(0)


def test_the_doctor_asks_slack_who_the_app_is(home: Home) -> None:
    fake = slack_fake()
    try:
        with FakeOpenAI() as llm:
            done = run_cli("doctor", env=cli_env(home, llm, **slack_env(fake)))
            line = slack_line(done.stdout)
            assert line.startswith("✓ slack") and f"owner {OWNER}" in line and "socket mode" in line
            fake.fail("auth.test", "invalid_auth")
            refused = run_cli("doctor", env=cli_env(home, llm, **slack_env(fake)))
        line = slack_line(refused.stdout)
        assert line.startswith("✗ slack") and "invalid_auth" in line and "***" in line
        assert refused.returncode == 1
        for output in (done.stdout + done.stderr, refused.stdout + refused.stderr):
            assert BOT_TOKEN not in output and APP_TOKEN not in output
    finally:
        fake.stop()


def test_status_shows_the_channel_masked(home: Home) -> None:
    fake = slack_fake()
    try:
        done = run_cli("status", env=cli_env(home, None, **slack_env(fake)))
    finally:
        fake.stop()
    line = slack_line(done.stdout)
    assert "bot token set (***" in line and f"owner {OWNER}" in line
    assert "1 member in allow_from" in line and "Socket Mode (app token ***" in line
    assert BOT_TOKEN not in done.stdout and APP_TOKEN not in done.stdout
