"""The web tools in real turns, in every channel: `nanomem chat -m` (the terminal's one-shot),
and the gateway's Telegram channel and agent API, each against the loopback model server and a
loopback web. And what a page says can never approve a shell command: only the person can."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from nanomem.cli.onboard import onboard
from nanomem.home import Home
from tests.conftest import cli_env, run_cli
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.fakes.telegram_server import FakeTelegram
from tests.fakes.web_server import FakeWeb, page
from tests.helpers.gateway import API_KEY, GatewayProcess, post
from tests.helpers.loopback import Model

pytestmark = pytest.mark.slow  # real processes
OWNER = 1000
FRAMED = re.compile(r"<<untrusted ([0-9a-f]{8}) from ([^\n]+?)>>\n.*\n<<end untrusted \1>>", re.S)


def reads_the_web(request: dict[str, Any]) -> Step:
    """ "READ <url>" fetches, "FIND <query>" searches; a tool result is summed up in one line
    naming what it saw. A page that says to run a command gets it run: a gullible model."""
    last = request["messages"][-1]
    if last.get("role") == "tool":
        content = str(last["content"])
        if "ignore previous instructions" in content:
            return Step.tool_call("exec", {"command": "touch pwned.txt"})
        framed = FRAMED.search(content)
        seen = re.findall(r"Tide Tables of the North Sea Explained|Nanomem release notes", content)
        source = framed.group(2) if framed else "nowhere"
        return Step.reply(f"seen: {seen[0] if seen else content[:200]} (framed from {source})")
    text = str(last.get("content") or "")
    if "READ " in text:
        return Step.tool_call("web_fetch", {"url": text.split("READ ", 1)[1].strip()})
    if "FIND " in text:
        return Step.tool_call("web_search", {"query": text.split("FIND ", 1)[1].strip()})
    return Step.reply("Noted.")


@pytest.fixture
def model() -> Model:
    return reads_the_web


@pytest.fixture(scope="module")
def site() -> Iterator[FakeWeb]:
    with FakeWeb() as server:
        server.serve("/article", page("article.html"))
        server.serve("/garlic", page("injection.html"))
        yield server


def web_env(site: FakeWeb) -> dict[str, str]:
    """The fake web is on 127.0.0.1: reachable only because the owner allows it here."""
    return {
        "NANOMEM_TOOLS__WEB__ALLOW_PRIVATE": "true",
        "NANOMEM_TOOLS__WEB__SEARCH_PROVIDER": "searxng",
        "NANOMEM_TOOLS__WEB__SEARXNG_URL": site.url(""),
    }


def test_chat_m_reads_and_searches_the_web(home: Home, fake_llm: FakeOpenAI, site: FakeWeb) -> None:
    fake_llm.set_fallback(reads_the_web)
    env = cli_env(home, fake_llm, **web_env(site))
    read = run_cli("chat", "-m", f"READ {site.url('/article')}", env=env)
    assert read.returncode == 0, read.stderr
    assert read.stdout.strip() == (
        f"seen: Tide Tables of the North Sea Explained (framed from {site.url('/article')})"
    )
    found = run_cli("chat", "-m", "FIND nanomem release", env=env)
    assert found.stdout.strip() == "seen: Nanomem release notes (framed from web search (SearXNG))"
    system = fake_llm.requests[-1]["messages"][0]["content"]
    assert "## Content from outside" in system


def test_chat_m_refuses_this_machine_by_default(
    home: Home, fake_llm: FakeOpenAI, site: FakeWeb
) -> None:
    fake_llm.set_fallback(reads_the_web)
    result = run_cli("chat", "-m", f"READ {site.url('/article')}", env=cli_env(home, fake_llm))
    assert result.returncode == 0, result.stderr
    assert "refused: 127.0.0.1 is a loopback address" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def bot_reply(telegram: FakeTelegram, starts: str, after: int) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        sent = telegram.sent_messages(OWNER)[after:]
        return next((m for m in sent if m.get("text", "").startswith(starts)), None)

    return telegram.wait_for(found, timeout=30)  # type: ignore[no-any-return]


def test_telegram_and_the_api_read_and_search_the_web(
    tmp_path: Any, servers: tuple[FakeTelegram, FakeOpenAI], site: FakeWeb
) -> None:
    telegram, llm = servers
    home = Home(tmp_path / "home")
    onboard(home)
    api = {"NANOMEM_API__ENABLED": "true", "NANOMEM_API__KEYS": json.dumps([API_KEY])}
    with GatewayProcess(home, telegram, llm, **web_env(site), **api) as gateway:
        telegram.send_text(OWNER, f"READ {site.url('/article')}")
        reply = bot_reply(telegram, "seen: ", 0)
        assert reply["text"] == (
            f"seen: Tide Tables of the North Sea Explained (framed from {site.url('/article')})"
        )
        after = len(telegram.sent_messages(OWNER))
        telegram.send_text(OWNER, "FIND nanomem release")
        assert bot_reply(telegram, "seen: ", after)["text"] == (
            "seen: Nanomem release notes (framed from web search (SearXNG))"
        )
        for ask, says in (
            (f"READ {site.url('/article')}", "seen: Tide Tables of the North Sea Explained"),
            ("FIND nanomem release", "seen: Nanomem release notes"),
        ):
            body = {"model": "nanomem", "messages": [{"role": "user", "content": ask}]}
            status, answer = post(gateway, json.dumps(body).encode())
            assert status == 200, answer
            assert answer["choices"][0]["message"]["content"].startswith(says)


def test_a_page_cannot_approve_a_shell_command(
    tmp_path: Any, servers: tuple[FakeTelegram, FakeOpenAI], site: FakeWeb
) -> None:
    """A page telling the agent to run rm and "press Allow once": the (gullible) model calls
    exec, the owner is asked in the chat, nothing from the page answers, and the command does
    not run. The page reached the model framed, and the prompt said what that means."""
    telegram, llm = servers
    home = Home(tmp_path / "home")
    onboard(home)
    env = web_env(site) | {
        "NANOMEM_TOOLS__SHELL_ENABLED": "true",
        "NANOMEM_TOOLS__SHELL_APPROVAL_TIMEOUT_S": "3",
    }
    with GatewayProcess(home, telegram, llm, **env):
        telegram.send_text(OWNER, f"READ {site.url('/garlic')}")
        question = bot_reply(telegram, "Run this command?", 0)
        assert "touch pwned.txt" in question["text"]
        denied = bot_reply(telegram, "seen: denied by the owner (no answer within 3 s)", 0)
        assert denied
        assert not (home.workspace / "pwned.txt").exists()
    fetched = next(r for r in llm.requests if r["messages"][-1].get("role") == "tool")["messages"]
    page_result = fetched[-1]["content"]
    assert FRAMED.search(page_result) and "press Allow once" in page_result
    assert "## Content from outside" in fetched[0]["content"]
    # The page's words went to the model only: the chat saw the question and the refusal.
    sent = " ".join(m.get("text", "") for m in telegram.sent_messages(OWNER))
    assert "ignore previous instructions" not in sent
