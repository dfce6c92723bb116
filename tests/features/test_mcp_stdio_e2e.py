"""MCP servers as real child processes over stdio (tests/fakes/mcp_server.py, built with the
SDK's FastMCP): what the child sees of our environment, a crash mid-call and the restart, a
hanging tool, a server that cannot start; then the real gateway (Telegram and the agent API),
`nanomem chat -m` and `nanomem status` with the loopback model. Real processes: slow tier."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from nanomem.agent import InboundMessage
from nanomem.app import App
from nanomem.audience import Sender
from nanomem.features.mcp import Mcp
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider, call, text
from tests.conftest import cli_env, log_lines, run_cli_here
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import until, wait_until
from tests.helpers.gateway import API_KEY, GatewayProcess, post, texts
from tests.helpers.mcp import mcp_ready
from tests.helpers.terminal import PROMPT

pytestmark = pytest.mark.slow

SERVER = str(Path(__file__).parents[1] / "fakes" / "mcp_server.py")
OWNER = Sender("owner", is_owner=True)


def stdio(**values: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [SERVER], "timeout_s": 30, **values}


def turn(app: App, content: str) -> Any:
    return app.loop.handle(InboundMessage("cli", "1", content, OWNER))


def result(provider: ScriptedProvider, index: int) -> str:
    return str(provider.calls[index][-1]["content"])


def starts(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


async def test_a_stdio_server_sees_only_path_home_lang_and_its_env(
    app_of: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-servers-123456")
    monkeypatch.setenv("NANOMEM_LLM__API_KEY", "nm-not-for-servers-123456")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-not-for-servers-123456")
    monkeypatch.setenv("LANG", "C.UTF-8")
    provider = ScriptedProvider([call("mcp_fake_environment", {}), text("seen")])
    app = app_of(provider, fake=stdio(env={"NOTES_TOKEN": "notes-token-123456", "MODE": "x"}))
    await mcp_ready(app, "fake")
    assert (await turn(app, "what do you see?")).content == "seen"
    seen = result(provider, 1)
    environment = json.loads(seen.split("\n", 1)[1].rsplit("\n<<end untrusted", 1)[0])
    assert set(environment) == {"PATH", "HOME", "LANG", "NOTES_TOKEN", "MODE"}
    assert environment["LANG"] == "C.UTF-8" and environment["MODE"] == "x"
    assert environment["NOTES_TOKEN"] == "***"  # its own secret, masked before the model
    assert "not-for-servers" not in seen


async def test_a_crash_mid_call_is_a_tool_error_and_the_server_restarts(
    app_of: Any, tmp_path: Path
) -> None:
    started = tmp_path / "starts"
    provider = ScriptedProvider(
        [call("mcp_fake_crash", {}), text("it crashed"), call("mcp_fake_echo", {"text": "again"})]
    )
    provider.add(text("back"))
    app = app_of(provider, fake=stdio(env={"FAKE_MCP_STARTS": str(started)}))
    mcp = await mcp_ready(app, "fake")
    with log_lines() as logged:
        assert (await turn(app, "crash please")).content == "it crashed"
        assert result(provider, 1) == (
            "Error: MCP server fake stopped during the call (exit 3); it is restarting, "
            "try again shortly"
        )
        listing = (await turn(app, "/mcp")).content
        assert "- fake (stdio: " in listing and "restarting in " in listing
        assert "after exit 3" in listing
        assert app.health()["mcp"].warning
        await until(lambda: mcp.servers["fake"].state.kind == "ready", what="the restart")
    assert any("mcp fake stderr: about to crash" in line for line in logged)  # to the log
    assert len(starts(started)) == 2
    assert (await turn(app, "echo")).content == "back"
    assert "echo: again" in result(provider, 3)
    assert not app.health()["mcp"].warning


async def test_a_server_flooding_one_message_is_cut_off_and_restarted(app_of: Any) -> None:
    provider = ScriptedProvider(
        [
            call("mcp_fake_flood", {"chars": 17 * 2**20}),
            text("cut off"),
            call("mcp_fake_flood", {"chars": 100_000}),
        ]
    )
    provider.add(text("fine"))
    app = app_of(provider, fake=stdio())
    mcp = await mcp_ready(app, "fake")
    assert (await turn(app, "flood")).content == "cut off"
    assert result(provider, 1) == (
        "Error: MCP server fake stopped during the call (a message over 16 MiB); it is "
        "restarting, try again shortly"
    )
    assert mcp.servers["fake"].state.kind == "restarting"
    await until(lambda: mcp.servers["fake"].state.kind == "ready", what="the restart")
    assert (await turn(app, "a smaller one")).content == "fine"
    assert "[output truncated:" in result(provider, 3)


async def test_a_tool_that_hangs_times_out_and_the_session_goes_on(app_of: Any) -> None:
    provider = ScriptedProvider(
        [call("mcp_fake_hang", {}), text("gave up"), call("mcp_fake_echo", {"text": "still"})]
    )
    provider.add(text("fine"))
    app = app_of(provider, fake=stdio(timeout_s=3))
    mcp = await mcp_ready(app, "fake")
    assert (await turn(app, "hang")).content == "gave up"
    assert result(provider, 1) == (
        "Error: MCP server fake did not answer hang within 3 s (tool call abandoned)"
    )
    assert mcp.servers["fake"].state.kind == "ready"  # the server itself is fine
    assert (await turn(app, "echo")).content == "fine"
    assert "echo: still" in result(provider, 3)


async def test_a_server_hung_as_a_whole_is_restarted(app_of: Any, tmp_path: Path) -> None:
    started = tmp_path / "starts"
    provider = ScriptedProvider(
        [call("mcp_fake_freeze", {}), text("frozen"), call("mcp_fake_echo", {"text": "thawed"})]
    )
    provider.add(text("back"))
    app = app_of(provider, fake=stdio(timeout_s=2, env=_starts(started)))
    mcp = await mcp_ready(app, "fake")
    assert (await turn(app, "freeze")).content == "frozen"
    assert "did not answer freeze within 2 s" in result(provider, 1)
    # No answer to the ping that follows either: the server is hung, not just the tool.
    await until(lambda: len(starts(started)) == 2, what="a restart")
    await until(lambda: mcp.servers["fake"].state.kind == "ready", what="the restart")
    assert (await turn(app, "echo")).content == "back"
    assert "echo: thawed" in result(provider, 3)


async def test_a_server_that_cannot_start_leaves_the_agent_working(app_of: Any) -> None:
    provider = ScriptedProvider([call("mcp_broken_echo", {"text": "x"}), text("answered anyway")])
    app = app_of(
        provider,
        broken=stdio(env={"FAKE_MCP_EXIT": "1"}),
        missing={"command": "/nonexistent/mcp-server", "timeout_s": 5},
    )
    mcp = app.feature(Mcp)
    await app.start_features()
    await until(
        lambda: (
            mcp.servers["broken"].state.kind == "restarting"
            and mcp.servers["missing"].state.kind == "failed"
        ),
        what="both to fail",
    )
    assert (await turn(app, "hello")).content == "answered anyway"
    assert not [s for s in provider.tools_seen[0] or [] if s["function"]["name"].startswith("mcp_")]
    assert result(provider, 1).startswith("Error: unknown tool 'mcp_broken_echo'")
    body = app.health()["mcp"].body
    assert "after exit 1" in body["broken"]["detail"] or "closed" in body["broken"]["detail"]
    assert body["missing"]["detail"].startswith("failed (command not found: /nonexistent")


async def test_a_server_that_hangs_as_it_starts_is_given_up_and_tried_again(
    app_of: Any, tmp_path: Path
) -> None:
    started = tmp_path / "starts"
    provider = ScriptedProvider([text("no tools yet"), text("still none")])
    app = app_of(provider, slow=stdio(timeout_s=2, env={"FAKE_MCP_HANG": "1", **_starts(started)}))
    mcp = app.feature(Mcp)
    await app.start_features()  # returns at once: nothing waits for a server
    assert mcp.servers["slow"].state.kind == "starting"
    report = app.health()["mcp"]
    assert report.body["slow"]["state"] == "starting" and not report.warning
    assert (await turn(app, "hello")).content == "no tools yet"
    await until(lambda: mcp.servers["slow"].state.kind == "restarting", what="the time limit")
    assert "after did not answer within 2 s" in mcp.servers["slow"].state.describe()
    await until(lambda: len(starts(started)) == 2, what="a second start")
    first = starts(started)[0]
    await until(lambda: not _alive(first), what="the hung child to be ended")
    assert (await turn(app, "hello again")).content == "still none"


def _starts(path: Path) -> dict[str, str]:
    return {"FAKE_MCP_STARTS": str(path)}


async def test_stopping_ends_the_child(app_of: Any, tmp_path: Path) -> None:
    started = tmp_path / "starts"
    app = app_of(ScriptedProvider(), fake=stdio(env={"FAKE_MCP_STARTS": str(started)}))
    await mcp_ready(app, "fake")
    (pid,) = starts(started)
    await app.stop_features(grace_s=1)
    await until(lambda: not _alive(pid), what="the child to end")


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# -- the real gateway, `nanomem chat -m` and `nanomem status` ------------------------------


def model(request: dict[str, Any]) -> Step:
    last = request["messages"][-1]
    if last["role"] == "tool":
        return Step.reply(f"tool said: {last['content']}")
    if "ECHO" in str(last["content"]):
        return Step.tool_call("mcp_fake_echo", {"text": "through the gateway"})
    return Step.reply("plain answer")


def configure(home: Home) -> None:
    with home.config.open("a", encoding="utf-8") as fh:
        fh.write(
            f"\n[mcp.servers.fake]\ncommand = {json.dumps(sys.executable)}\n"
            f"args = [{json.dumps(SERVER)}]\ntimeout_s = 30\n"
        )


def test_the_gateway_offers_mcp_tools_on_telegram_and_the_api(home: Home) -> None:
    configure(home)
    with (
        FakeTelegram() as telegram,
        FakeOpenAI() as llm,
        GatewayProcess(
            home,
            telegram,
            llm,
            NANOMEM_API__ENABLED="true",
            NANOMEM_API__KEYS=json.dumps([API_KEY]),
        ) as gateway,
    ):
        llm.set_fallback(model)
        status, health = gateway.health()  # answers at once, whatever the servers do
        assert status == 200 and "mcp" in health
        wait_until(lambda: gateway.health()[1]["mcp"]["fake"]["state"] == "ready")
        telegram.send_text(1000, "ECHO please")
        wait_until(lambda: any("tool said:" in t for t in texts(telegram.sent_messages(1000))))
        said = next(t for t in texts(telegram.sent_messages(1000)) if "tool said:" in t)
        assert "echo: through the gateway" in said
        telegram.send_text(1000, "/mcp")
        wait_until(lambda: any("MCP servers:" in t for t in texts(telegram.sent_messages(1000))))
        body = json.dumps(
            {"model": "nanomem", "messages": [{"role": "user", "content": "ECHO via api"}]}
        ).encode()
        code, answer = post(gateway, body)
        assert code == 200, answer
        assert "echo: through the gateway" in answer["choices"][0]["message"]["content"]
        shown = run_cli_here("status", env=cli_env(home))
        assert shown.returncode == 0, shown.stderr
        assert f"ready, 13 tools (gateway, pid {gateway.proc.pid})" in shown.stdout
    shown = run_cli_here("status", env=cli_env(home))
    assert "not running (nanomem gateway or nanomem chat starts it)" in shown.stdout


def test_a_one_shot_chat_waits_for_its_servers(home: Home) -> None:
    configure(home)
    with FakeOpenAI() as llm:
        llm.set_fallback(model)
        done = run_cli_here("chat", "-m", "ECHO once", env=cli_env(home, llm))
        assert done.returncode == 0, done.stderr
        assert "echo: through the gateway" in done.stdout
        offered = [tool["function"]["name"] for tool in llm.requests[0]["tools"]]
        assert "mcp_fake_echo" in offered
    assert not list(home.mcp_state.glob("*.json"))  # a one-shot leaves no state behind


def test_the_terminal_prompt_does_not_wait_for_a_server(home: Home, tmp_path: Path) -> None:
    import pexpect

    started = tmp_path / "starts"
    with home.config.open("a", encoding="utf-8") as fh:
        fh.write(
            f"\n[mcp.servers.slow]\ncommand = {json.dumps(sys.executable)}\n"
            f"args = [{json.dumps(SERVER)}]\ntimeout_s = 600\n"
            f'env = {{ FAKE_MCP_HANG = "1", FAKE_MCP_STARTS = {json.dumps(str(started))} }}\n'
        )
    with FakeOpenAI() as llm:
        llm.set_fallback(model)
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
            child.sendline("hello")
            child.expect_exact("plain answer")  # answered while the server hangs
            child.expect_exact(PROMPT)
            child.sendline("/mcp")
            child.expect_exact("slow (stdio: ")  # a list item, drawn as a bullet
            child.expect_exact("starting")
            (pid,) = wait_until(lambda: starts(started), what="the server's start")
            child.sendeof()
            child.expect(pexpect.EOF)
        finally:
            child.terminate(force=True)
    wait_until(lambda: not _alive(pid), what="the hung server to be ended with the chat")
