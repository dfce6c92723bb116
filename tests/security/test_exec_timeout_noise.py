"""A shell command that floods its output and outlives tools.shell_timeout_s, run by the real
`nanomem chat -m` against the loopback model: the person reads the timeout, and nothing of
asyncio's ("Exception ignored ... Event loop is closed") reaches stderr after the turn."""

from __future__ import annotations

from typing import Any

import pytest

from nanomem.home import Home
from nanomem.tools.sandbox import decide
from tests.conftest import cli_env, run_cli
from tests.fakes.openai_server import FakeOpenAI, Step

FLOOD = "yes nanomem-flood-line"  # writes as fast as the pipe takes it, forever


def runs_the_flood(request: dict[str, Any]) -> Step:
    last = request["messages"][-1]
    if last.get("role") == "tool":
        return Step.reply(f"result: {last['content']}")
    return Step.tool_call("exec", {"command": FLOOD})


SANDBOXES = [
    "off",
    pytest.param(
        "bwrap",
        marks=pytest.mark.skipif(decide("bwrap").refuses, reason="bubblewrap cannot run here"),
    ),
]


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_flooding_command_that_times_out_leaves_no_noise(
    home: Home, fake_llm: FakeOpenAI, sandbox: str
) -> None:
    fake_llm.set_fallback(runs_the_flood)
    env = cli_env(
        home,
        fake_llm,
        NANOMEM_TOOLS__SHELL_ENABLED="true",
        NANOMEM_TOOLS__SHELL_APPROVAL="off",
        NANOMEM_TOOLS__SHELL_TIMEOUT_S="1",
        NANOMEM_TOOLS__SHELL_SANDBOX=sandbox,
    )
    ran = run_cli("chat", "-m", "flood the terminal", env=env)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("result: Error: command timed out after 1s and was killed")
    assert "Exception ignored" not in ran.stderr
    assert "Event loop is closed" not in ran.stderr
    assert "Traceback" not in ran.stderr
