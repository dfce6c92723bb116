"""Dream review through the real gateway: a fact told on Telegram, archived, dreamed with
dream.review = "ask", kept out of USER.md until the owner presses Approve on the fake Bot API;
a rejected change stays out and is not proposed again."""

from __future__ import annotations

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
FACTS = {"Quito": "- Lives in Quito", "Tom": "- Has a cat called Tom"}
REJECTED_NOTE = "Changes the owner rejected"


def reviewing(request: dict[str, Any]) -> Step:
    """The chat, the archive summary, and both Dream phases, told apart by their prompts."""
    messages = request["messages"]
    prompt = "\n".join(str(m.get("content") or "") for m in messages)
    last = str(messages[-1].get("content") or "")
    tools = {t["function"]["name"] for t in request.get("tools") or []}
    if "append_memory" in tools:  # Dream's edit phase
        if messages[-1].get("role") == "tool" or "NEW: USER.md: " not in last:
            return Step.reply("Done.")
        fact = FACTS[last.split("NEW: USER.md: ")[1].split()[0]]
        return Step.tool_call("append_memory", {"file": "USER.md", "line": fact})
    if "analysis only" in last:  # Dream's analyse phase
        history = last.split("## Current memory files")[0]
        rejected = prompt.split(REJECTED_NOTE)[1] if REJECTED_NOTE in prompt else ""
        new = [w for w in FACTS if w in history and w not in rejected]
        return Step.reply(f"NEW: USER.md: {new[0]}" if new else "NOTHING TO CHANGE")
    if "Summarise everything above" in last:  # /new archives the conversation
        told = [w for w in FACTS if w in prompt] or ["nothing much"]
        return Step.reply(f"- 2026-11-23: the user mentioned {told[-1]}")
    return Step.reply("Noted.")


@pytest.fixture
def model() -> Model:
    return reviewing


def exchange(telegram: FakeTelegram, text: str) -> dict[str, Any]:
    """Send `text` as the owner; the bot's next message."""
    count = len(telegram.sent_messages(OWNER))
    telegram.send_text(OWNER, text)
    return telegram.wait_for_messages(OWNER, count + 1, timeout=30)[count]


def dream_about(telegram: FakeTelegram, fact: str) -> dict[str, Any]:
    """Tell a fact, archive it, dream: the proposal message, with its buttons."""
    assert exchange(telegram, f"remember: {fact}")["text"] == "Noted."
    assert exchange(telegram, "/new")["text"].startswith("New session started.")
    proposal = exchange(telegram, "/dream")
    assert proposal["text"].startswith("Dream prepared a memory change")
    return proposal


def press(telegram: FakeTelegram, proposal: dict[str, Any], label: str) -> dict[str, Any]:
    """Press a button under the proposal; the bot's answer to it."""
    count = len(telegram.sent_messages(OWNER))
    query = telegram.press(proposal, telegram.button_data(proposal, label))
    answer = telegram.wait_for_messages(OWNER, count + 1, timeout=30)[count]
    assert telegram.wait_for(
        lambda: any(a["callback_query_id"] == query for a in telegram.press_answers())
    )
    return answer


def test_a_change_waits_for_the_owner_s_press(
    tmp_path: Any, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    telegram, llm = servers
    home = Home(tmp_path / "home")
    onboard(home)
    user_md = home.workspace / "USER.md"
    before = user_md.read_text()
    gateway = GatewayProcess(home, telegram, llm, NANOMEM_DREAM__REVIEW="ask")
    try:
        proposal = dream_about(telegram, "I live in Quito")
        assert "+- Lives in Quito" in proposal["text"]
        assert user_md.read_text() == before  # nothing live before the owner says yes
        approved = press(telegram, proposal, "Approve")
        assert approved["text"].startswith("Approved ")
        assert "- Lives in Quito" in user_md.read_text()
        assert telegram.wait_for(lambda: telegram.markup_edits(OWNER))  # buttons gone

        proposal = dream_about(telegram, "my cat is called Tom")
        rejected = press(telegram, proposal, "Reject")
        assert rejected["text"].startswith("Rejected ")
        assert "Tom" not in user_md.read_text()

        # The next run reads new history that mentions Tom again: told of the rejection, the
        # model proposes nothing.
        assert exchange(telegram, "remember: Tom again")["text"] == "Noted."
        assert exchange(telegram, "/new")["text"].startswith("New session started.")
        again = exchange(telegram, "/dream")
        assert again["text"] == "Read 1 history entry; nothing worth changing in memory."
        analyse = [r for r in llm.requests if "analysis only" in str(r["messages"][-1])][-1]
        note = str(analyse["messages"][-1]["content"]).split(REJECTED_NOTE)[1]
        assert "+- Has a cat called Tom" in note
        assert "Tom" not in user_md.read_text() and "- Lives in Quito" in user_md.read_text()
    finally:
        assert gateway.stop() == 0


def test_a_change_dreamed_by_cron_reaches_the_owner_on_telegram(
    tmp_path: Any, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    telegram, llm = servers
    home = Home(tmp_path / "home")
    onboard(home)
    gateway = GatewayProcess(home, telegram, llm, NANOMEM_DREAM__REVIEW="ask")
    try:
        assert exchange(telegram, "remember: I live in Quito")["text"] == "Noted."
        assert exchange(telegram, "/new")["text"].startswith("New session started.")
        count = len(telegram.sent_messages(OWNER))
        cron = run_cli("dream", env=cli_env(home, llm, NANOMEM_DREAM__REVIEW="ask"))
        assert cron.returncode == 0 and cron.stdout.startswith("Dream prepared a memory change")
        notice = telegram.wait_for_messages(OWNER, count + 1, timeout=30)[count]
        assert notice["text"].startswith("Dream prepared a memory change")
        assert press(telegram, notice, "Approve")["text"].startswith("Approved ")
        assert "- Lives in Quito" in (home.workspace / "USER.md").read_text()
    finally:
        assert gateway.stop() == 0
