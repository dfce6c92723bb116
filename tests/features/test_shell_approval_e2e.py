"""Shell commands approved from chat, through the real gateway: an exec call in Telegram shows
Allow once / Always allow / Deny buttons, a press lets it run, Deny and silence do not; and
`chat -m`, where nobody can be asked, denies by default."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nanomem.cli.onboard import onboard
from nanomem.home import Home
from tests.conftest import cli_env, run_cli
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers.gateway import GatewayProcess
from tests.helpers.loopback import Model

OWNER = 1000
TIMEOUT_S = "6"  # tools.shell_approval_timeout_s: the silent case waits it out
SHELL = {"NANOMEM_TOOLS__SHELL_ENABLED": "true"}


def runs_commands(request: dict[str, Any]) -> Step:
    """ "RUN <command>" calls exec; a tool result is quoted back as the answer."""
    last = request["messages"][-1]
    if last.get("role") == "tool":
        return Step.reply(f"result: {last['content']}")
    text = str(last.get("content") or "")
    if "RUN " in text:
        return Step.tool_call("exec", {"command": text.split("RUN ", 1)[1].strip()})
    return Step.reply("Noted.")


@pytest.fixture
def model() -> Model:
    return runs_commands


def bot_message(telegram: FakeTelegram, starts: str, after: int = 0) -> dict[str, Any]:
    """The first message the bot sent the owner (from index `after`) starting with `starts`."""

    def found() -> dict[str, Any] | None:
        sent = telegram.sent_messages(OWNER)[after:]
        return next((m for m in sent if m.get("text", "").startswith(starts)), None)

    return telegram.wait_for(found, timeout=30)  # type: ignore[no-any-return]


def ask(telegram: FakeTelegram, command: str) -> tuple[dict[str, Any], int]:
    """Make the model want to run `command`; the question the bot asks, and where it is."""
    after = len(telegram.sent_messages(OWNER))
    telegram.send_text(OWNER, f"RUN {command}")
    question = bot_message(telegram, "Run this command?", after)
    assert command in question["text"]
    return question, after


def press(telegram: FakeTelegram, question: dict[str, Any], label: str) -> None:
    telegram.press(question, telegram.button_data(question, label))


def test_the_owner_approves_commands_from_telegram(
    tmp_path: Any, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    telegram, llm = servers
    home = Home(tmp_path / "home")
    onboard(home)
    env = SHELL | {"NANOMEM_TOOLS__SHELL_APPROVAL_TIMEOUT_S": TIMEOUT_S}
    gateway = GatewayProcess(home, telegram, llm, **env)
    try:
        question, after = ask(telegram, "echo approved")
        labels = [b["text"] for b in question["reply_markup"]["inline_keyboard"][0]]
        assert labels == ["Allow once", "Always allow echo", "Deny"]
        press(telegram, question, "Allow once")
        assert bot_message(telegram, "result: exit code 0", after)["text"].endswith("approved")
        assert bot_message(telegram, "Allowed once.", after)

        question, after = ask(telegram, "echo refused > proof.txt")
        press(telegram, question, "Deny")
        assert bot_message(telegram, "result: denied by the owner", after)
        assert bot_message(telegram, "Denied.", after)
        assert not (home.workspace / "proof.txt").exists()

        question, after = ask(telegram, "touch silence.txt")
        answer = bot_message(telegram, "result: denied by the owner", after)
        assert f"no answer within {TIMEOUT_S} s" in answer["text"]
        assert not (home.workspace / "silence.txt").exists()

        question, after = ask(telegram, "echo always")
        press(telegram, question, "Always allow echo")
        assert bot_message(telegram, "result: exit code 0", after)["text"].endswith("always")
        allowlist = json.loads((home.root / "shell-allowlist.json").read_text())
        assert allowlist["prefixes"] == ["echo"]
        after = len(telegram.sent_messages(OWNER))
        telegram.send_text(OWNER, "RUN echo without asking")
        reply = bot_message(telegram, "result: ", after)
        assert reply["text"].endswith("without asking")
        assert not [m for m in telegram.sent_messages(OWNER)[after:] if "Run this" in m["text"]]
    finally:
        assert gateway.stop() == 0


def test_chat_m_denies_unless_allowlisted(home: Home, fake_llm: FakeOpenAI) -> None:
    fake_llm.set_fallback(runs_commands)
    env = cli_env(home, fake_llm, **SHELL)
    denied = run_cli("chat", "-m", "RUN touch made.txt", env=env)
    assert denied.returncode == 0, denied.stderr
    assert denied.stdout.startswith("result: denied by the owner")
    assert not (home.workspace / "made.txt").exists()

    allowed = run_cli("chat", "-m", "/allowed", env=env)
    assert allowed.stdout.startswith("No command runs without asking")
    (home.root / "shell-allowlist.json").write_text(json.dumps({"v": 1, "prefixes": ["touch"]}))
    ran = run_cli("chat", "-m", "RUN touch made.txt", env=env)
    assert ran.stdout.startswith("result: exit code 0")
    assert (home.workspace / "made.txt").exists()
    chained = run_cli("chat", "-m", "RUN touch a.txt; touch b.txt", env=env)
    assert chained.stdout.startswith("result: denied by the owner")
    assert not (home.workspace / "b.txt").exists()
    removed = run_cli("chat", "-m", "/disallow touch", env=env)
    assert removed.stdout.strip() == "`touch` commands will be asked about again."
    again = run_cli("chat", "-m", "RUN touch other.txt", env=env)
    assert again.stdout.startswith("result: denied by the owner")
