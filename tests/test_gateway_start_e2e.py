"""The real gateway says at start where each channel takes messages: GET /health, the agent
API's /v1 base URL, Telegram's polling, the MCP servers it starts; in the log (stderr) and, for a
person at a terminal, on stdout. Real processes: slow tier."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pexpect
import pytest

from nanomem.home import Home
from tests.conftest import cli_env
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import WAIT_S
from tests.helpers.gateway import API_KEY, GatewayProcess

pytestmark = pytest.mark.slow

SERVER = str(Path(__file__).parent / "fakes" / "mcp_server.py")


def test_the_log_says_where_each_channel_listens(home: Home) -> None:
    servers = {"fake": {"command": sys.executable, "args": [SERVER], "timeout_s": 30}}
    env = {
        "NANOMEM_API__ENABLED": "true",
        "NANOMEM_API__KEYS": json.dumps([API_KEY]),
        "NANOMEM_MCP__SERVERS": json.dumps(servers),
    }
    with (
        FakeTelegram() as telegram,
        FakeOpenAI() as llm,
        GatewayProcess(home, telegram, llm, **env) as gateway,
    ):
        server = f"http://127.0.0.1:{gateway.port}"
        gateway.wait_for_line(
            rf"gateway: api: OpenAI-compatible API, base URL {server}/v1 "
            r"\(a key from NANOMEM_API__KEYS\)"
        )
        gateway.wait_for_line(
            rf"gateway: telegram: polling getUpdates from {telegram.base_url} \(no webhook\)"
        )
        gateway.wait_for_line(r"mcp: starting fake \(each says when its tools are listed\)")
        gateway.wait_for_line(r"mcp fake: ready, 13 tools listed")
        assert API_KEY not in "".join(gateway.lines) and telegram.token not in "".join(
            gateway.lines
        )


def test_a_person_at_a_terminal_sees_it_on_stdout(home: Home) -> None:
    with FakeOpenAI() as llm:
        env = cli_env(
            home,
            llm,
            NANOMEM_API__ENABLED="true",
            NANOMEM_API__KEYS=json.dumps([API_KEY]),
            NANOMEM_GATEWAY__PORT="0",
            NANOMEM_DREAM__ENABLED="false",
            NANOMEM_LOG__LEVEL="WARNING",  # stderr quiet: stdout still says it
        )
        child = pexpect.spawn(
            sys.executable,
            ["-m", "nanomem", "gateway"],
            env=env,
            encoding="utf-8",
            timeout=WAIT_S,
            dimensions=(40, 200),
        )
        try:
            child.expect_exact("nanomem gateway is running (Ctrl-C stops it):")
            child.expect(r"  health  (http://127\.0\.0\.1:\d+)/health\r\n")
            server = child.match.group(1)
            child.expect_exact(f"  api     OpenAI-compatible API, base URL {server}/v1")
            child.kill(signal.SIGTERM)
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
        assert child.exitstatus == 0 and API_KEY not in (child.before or "")
