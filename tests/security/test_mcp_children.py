"""Every process an MCP server starts dies with nanomem: a stdio server that never answers
`initialize` and has started a grandchild in a session of its own (setsid), after a one-shot
`nanomem chat -m` that gave up on it, a `nanomem gateway` killed with SIGKILL or stopped with
SIGTERM, and a terminal chat that ended. Real processes: slow tier."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider
from tests.conftest import NANOMEM, cli_env, run_cli
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import wait_until
from tests.helpers.gateway import API_KEY
from tests.helpers.mcp import mcp_ready
from tests.helpers.terminal import PROMPT

pytestmark = pytest.mark.slow

HOSTILE = str(Path(__file__).parents[1] / "fakes" / "mcp_hostile.py")
SERVER = str(Path(__file__).parents[1] / "fakes" / "mcp_server.py")


def silent_server(home: Home, pids: Path, timeout_s: float = 2) -> None:
    with home.config.open("a", encoding="utf-8") as fh:
        fh.write(
            f"\n[mcp.servers.silent]\ncommand = {json.dumps(sys.executable)}\n"
            f'args = [{json.dumps(HOSTILE)}, "silent"]\ntimeout_s = {timeout_s}\n'
            f"env = {{ FAKE_MCP_PIDS = {json.dumps(str(pids))} }}\n"
        )


def started(pids: Path) -> list[int]:
    return [int(line) for line in pids.read_text().split()] if pids.exists() else []


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_one_shot_chat_leaves_no_server_nor_its_grandchild(home: Home, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    silent_server(home, pids)
    with FakeOpenAI() as llm:
        llm.reply("answered without it")
        began = time.monotonic()
        done = run_cli("chat", "-m", "hi", env=cli_env(home, llm), timeout=60)
        took = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    assert "answered without it" in done.stdout
    assert took < 30, took
    server, grandchild = started(pids)[:2]
    try:
        wait_until(lambda: not alive(server) and not alive(grandchild), timeout=10)
    finally:
        for pid in started(pids):
            _kill(pid)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["killed", "stopped"])
def test_a_gateway_leaves_no_server_nor_its_grandchild(
    home: Home, tmp_path: Path, sig: signal.Signals
) -> None:
    pids = tmp_path / "pids"
    silent_server(home, pids, timeout_s=600)
    with FakeOpenAI() as llm:
        gateway = subprocess.Popen(
            [*NANOMEM, "gateway"],
            env=cli_env(
                home,
                llm,
                NANOMEM_API__ENABLED="true",
                NANOMEM_API__KEYS=json.dumps([API_KEY]),
                NANOMEM_GATEWAY__PORT="0",
                NANOMEM_DREAM__ENABLED="false",
            ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "stderr").open("wb"),
        )
        try:
            wait_until(lambda: len(started(pids)) >= 2, timeout=60, what="the server's start")
            gateway.send_signal(sig)
            gateway.wait(timeout=30)
            server, grandchild = started(pids)[:2]
            wait_until(lambda: not alive(server) and not alive(grandchild), timeout=10)
        finally:
            gateway.kill()
            gateway.wait(timeout=10)
            for pid in started(pids):
                _kill(pid)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def test_the_terminal_chat_leaves_no_server_nor_its_grandchild(home: Home, tmp_path: Path) -> None:
    import pexpect

    pids = tmp_path / "pids"
    silent_server(home, pids, timeout_s=600)
    with FakeOpenAI() as llm:
        child = pexpect.spawn(
            sys.executable,
            ["-m", "nanomem", "chat"],
            env=cli_env(home, llm, TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1"),
            encoding="utf-8",
            timeout=60,
            dimensions=(40, 100),
        )
        try:
            child.expect_exact(PROMPT)
            wait_until(lambda: len(started(pids)) >= 2, timeout=60, what="the server's start")
            child.sendeof()
            child.expect(pexpect.EOF)
        finally:
            child.terminate(force=True)
    server, grandchild = started(pids)[:2]
    try:
        wait_until(lambda: not alive(server) and not alive(grandchild), timeout=10)
    finally:
        for pid in started(pids):
            _kill(pid)


async def test_the_shells_orphan_sweep_leaves_a_running_server_alone(app_of: Any) -> None:
    # A command run without the sandbox is followed by a sweep of what we adopted since it
    # started: a server started meanwhile is ours, not a leftover of the command.
    from nanomem.tools import own_children
    from nanomem.tools.orphans import start_ticks, sweep

    app = app_of(ScriptedProvider(), fake={"command": sys.executable, "args": [SERVER]})
    mcp = await mcp_ready(app, "fake")
    (ours,) = own_children
    since = start_ticks(ours)
    assert since is not None
    assert await asyncio.to_thread(sweep, since, frozenset(own_children)) == 0
    assert alive(ours) and mcp.servers["fake"].state.kind == "ready"
