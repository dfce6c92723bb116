"""Issue 30: a small PDF built to keep pypdf busy for an hour (2,000 pages sharing one
megabyte of empty text runs), sent in a chat, fetched by `web_fetch` and opened by
`read_file`, through the real gateway: the Telegram channel against the loopback Bot API, the
model over HTTP. It is parsed in a child process that the time limit, /stop and shutdown kill;
the chat is told why, and other chats are answered meanwhile."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_gateway import LiveGateway, call, obedient, telegram_gateway
from tests.fakes.telegram_server import FakeTelegram
from tests.fakes.web_server import FakeWeb, poisoned_pdf, tiny_pdf
from tests.helpers import until
from tests.helpers.loopback import Model

OWNER = 1000
OTHERS = list(range(1001, 1007))  # six more people, each in a private chat
LIMIT_S = 3  # tools.documents.timeout_s, where the limit itself is under test
POISON = poisoned_pdf()


@pytest.fixture
def model() -> Model:
    return obedient


@pytest.fixture(scope="module")
def site() -> Iterator[FakeWeb]:
    with FakeWeb() as server:
        server.serve("/poison.pdf", POISON, "application/pdf")
        yield server


@asynccontextmanager
async def gateway(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI], timeout_s: float = LIMIT_S
) -> AsyncIterator[LiveGateway]:
    telegram, llm = servers
    async with telegram_gateway(
        home,
        telegram,
        llm,
        telegram={"allow_from": [OWNER, *OTHERS], "owner": OWNER},
        tools={"web": {"allow_private": True}, "documents": {"timeout_s": timeout_s}},
    ) as live:
        yield live


def pdf_parsers() -> list[int]:
    """The pids of this process's children parsing a PDF, read from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat[stat.rfind(b")") + 2 :].split()[1])
        if parent == os.getpid() and b"nanomem.tools.pdf" in command:
            found.append(int(entry.name))
    return found


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return state[state.rfind(b")") + 2 :].startswith(b"Z")  # not even reaped would be a leak


def seen_by_model(live: LiveGateway, words: str) -> bool:
    return any(words in str(r["messages"][-1]["content"]) for r in live.llm.requests)


def saved_pdfs(home: Home) -> list[Path]:
    """The PDFs the chats sent, saved for the tools (before they are read)."""
    return list((home.workspace / "media").rglob("*.pdf"))


def wrote(home: Home, name: str, data: bytes) -> str:
    media = home.workspace / "media"
    media.mkdir(exist_ok=True)
    (media / name).write_bytes(data)
    return f"media/{name}"


async def test_a_poisoned_pdf_sent_in_a_chat_is_cut_at_the_limit_and_others_are_answered(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    async with gateway(home, servers, timeout_s=10) as live:
        started = time.monotonic()
        live.telegram.send_document(OWNER, POISON, file_name="report.pdf")
        await until(lambda: saved_pdfs(home), 10)
        # Another chat is answered while the PDF is parsed.
        assert await live.say(OTHERS[0], "hello") == "plain answer"
        assert not live.telegram.sent_messages(OWNER)
        # The document's chat gets its answer once the limit is reached, and the model read why.
        await until(lambda: live.telegram.sent_messages(OWNER), 30)
        assert time.monotonic() - started < 10 + 15
        assert seen_by_model(live, "the PDF could not be read within 10 s")
        assert seen_by_model(live, "of 2000 pages read")
        assert not pdf_parsers()


async def test_six_poisoned_pdfs_at_once_leave_other_chats_answered(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    async with gateway(home, servers) as live:
        for person in OTHERS:
            live.telegram.send_document(person, POISON, file_name="report.pdf")
        await until(lambda: len(saved_pdfs(home)) == len(OTHERS), 10)
        started = time.monotonic()
        assert await live.say(OWNER, "are you there?") == "plain answer"
        assert time.monotonic() - started < 5
        for person in OTHERS:  # each is told, two parsers at a time
            await until(lambda person=person: live.telegram.sent_messages(person), 40)
        assert len(pdf_parsers()) == 0


async def test_web_fetch_of_a_poisoned_pdf_says_why_it_stopped(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI], site: FakeWeb
) -> None:
    async with gateway(home, servers) as live:
        started = time.monotonic()
        reply = await live.say(OWNER, call("web_fetch", url=site.url("/poison.pdf")))
        assert time.monotonic() - started < LIMIT_S + 15
        assert reply.startswith("tool said:")
        assert f"the PDF could not be read within {LIMIT_S} s" in reply
        assert not pdf_parsers()


async def test_read_file_of_a_poisoned_pdf_says_why_it_stopped(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    path = wrote(home, "poison.pdf", POISON)
    async with gateway(home, servers) as live:
        started = time.monotonic()
        reply = await live.say(OWNER, call("read_file", path=path))
        assert time.monotonic() - started < LIMIT_S + 15
        assert f"the PDF could not be read within {LIMIT_S} s" in reply
        assert "of 2000 pages read" in reply and "Traceback" not in reply
        # An ordinary PDF reads as before.
        path = wrote(home, "fine.pdf", tiny_pdf(["Revenue rose"]))
        assert await live.say(OWNER, call("read_file", path=path)) == (
            "tool said: ## Page 1\nRevenue rose"
        )


async def test_stop_kills_the_parser_of_a_turn_and_of_a_document_being_saved(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    path = wrote(home, "poison.pdf", POISON)
    async with gateway(home, servers, timeout_s=120) as live:  # only /stop can end it here
        # In a turn: read_file, which the model called.
        live.telegram.send_text(OWNER, call("read_file", path=path))
        (pid,) = await until(pdf_parsers, 10, every=0.1)
        assert await live.say(OWNER, "/stop") == "Stopped."
        await until(lambda: gone(pid), 5)
        # While a sent document is read, before its turn begins.
        live.telegram.send_document(OWNER, POISON, file_name="report.pdf")
        (pid,) = await until(pdf_parsers, 10, every=0.1)
        assert await live.say(OWNER, "/stop") == "Stopped."
        await until(lambda: gone(pid), 5)
        assert await live.say(OWNER, "still there?") == "plain answer"


async def test_shutdown_kills_a_parser_still_running(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    started = time.monotonic()
    async with gateway(home, servers, timeout_s=120) as live:
        live.telegram.send_document(OWNER, POISON, file_name="report.pdf")
        (pid,) = await until(pdf_parsers, 10, every=0.1)
    assert gone(pid)
    assert time.monotonic() - started < 30
    # The next start answers it (replayed from the inbox), and other chats, without hanging.
    async with gateway(home, servers) as live:
        assert await live.say(OTHERS[0], "hello") == "plain answer"
        await until(lambda: live.telegram.sent_messages(OWNER), 30)
        assert seen_by_model(live, "nanomem was stopping")
    assert not pdf_parsers()
