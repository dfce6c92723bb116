"""Documents sent on Telegram become text for the model, through the real gateway: the Telegram
channel against the loopback Bot API, the model over HTTP to the loopback OpenAI fake."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_gateway import LiveGateway, telegram_gateway
from tests.fakes.telegram_server import FakeTelegram
from tests.fakes.web_server import tiny_pdf

OWNER = 1000
LIMIT = 2000  # agent.max_message_chars here
UNTRUSTED = re.compile(
    r"<<untrusted (\w+) from document (\S+)>>\n(.*?)\n<<end untrusted \1>>", re.S
)


@pytest.fixture
async def live(home: Home, servers: tuple[FakeTelegram, FakeOpenAI]) -> AsyncIterator[LiveGateway]:
    telegram, llm = servers
    async with telegram_gateway(
        home,
        telegram,
        llm,
        telegram={"allow_from": [OWNER]},
        agent={"max_message_chars": LIMIT},
    ) as gateway:
        yield gateway


async def send(live: LiveGateway, data: bytes, name: str, caption: str = "") -> str:
    """The document's message as the model got it (the last user message of its request)."""
    await live.reply(
        OWNER,
        lambda: live.telegram.send_document(OWNER, data, file_name=name, caption=caption),
    )
    request: dict[str, Any] = live.llm.requests[-1]
    return str(request["messages"][-1]["content"])


def framed(message: str) -> list[tuple[str, str]]:
    """(file name, text) of each document block framed as outside text."""
    return [(name, text) for _, name, text in UNTRUSTED.findall(message)]


async def test_a_pdf_csv_and_source_file_reach_the_model_as_untrusted_text(
    live: LiveGateway, home: Home
) -> None:
    pdf = await send(live, tiny_pdf(["Quarterly revenue rose 12 percent"]), "report.pdf", "sum up")
    ((name, text),) = framed(pdf)
    assert name.endswith(".pdf") and "Quarterly revenue rose 12 percent" in text
    assert f"[document: {name}, 1 page]" in pdf
    assert "sum up" in pdf and "[document: report.pdf]" in pdf  # the caption, the sent name
    assert (home.workspace / "media" / name).exists()  # kept for the tools

    csv = await send(live, b"city,people\nOslo,709000\n", "cities.csv")
    ((name, text),) = framed(csv)
    assert name.endswith(".csv") and text == "city,people\nOslo,709000\n"

    source = await send(live, b"def greet():\n    return 'hej'\n", "greet.py")
    assert framed(source) == [(framed(source)[0][0], "def greet():\n    return 'hej'\n")]

    # The session keeps what the model saw: a retry and the Consolidator see the same text.
    session = await live.app.sessions.get(f"telegram:{OWNER}")
    stored = [m["content"] for m in session.messages]
    assert any("Quarterly revenue rose 12 percent" in str(c) for c in stored)


async def test_a_text_file_without_a_known_suffix_is_read_when_it_is_utf8(
    live: LiveGateway,
) -> None:
    message = await send(live, "Grüße aus Köln\n".encode(), "NOTES")
    assert [text for _, text in framed(message)] == ["Grüße aus Köln\n"]


async def test_an_oversized_text_is_cut_with_a_note_saying_how_much(live: LiveGateway) -> None:
    message = await send(live, b"x" * 5000, "big.txt", "read this")
    ((_, text),) = framed(message)
    shown = LIMIT - len("[document: big.txt]\nread this")
    assert text == "x" * shown
    assert f"[cut: {shown} of 5000 characters shown (agent.max_message_chars);" in message


async def test_a_broken_pdf_gives_a_short_note(live: LiveGateway) -> None:
    message = await send(live, b"%PDF-1.4\nthis is not really a pdf", "broken.pdf")
    assert framed(message) == []
    assert re.search(r"\[document: \S+\.pdf could not be read as text: [^\n\]]+\]", message)
    assert "Traceback" not in message


async def test_a_binary_document_stays_a_path(live: LiveGateway, home: Home) -> None:
    message = await send(live, b"PK\x03\x04\x14\x00" + bytes(range(256)), "photos.zip")
    assert framed(message) == [] and "[document: photos.zip]" in message
    (saved,) = (home.workspace / "media").iterdir()
    assert f"[attachments: media/{saved.name}]" in message


async def test_a_retry_sends_the_text_the_model_saw_even_when_the_file_is_gone(
    live: LiveGateway, home: Home
) -> None:
    live.llm.error(400, "the model refused the request")
    await send(live, b"Remember: the key is under the mat\n", "note.txt")
    (saved,) = (home.workspace / "media").iterdir()
    saved.unlink()  # the session keeps the text: nothing is read again
    await live.say(OWNER, "/retry")
    first, again = live.llm.requests  # the failed attempt, the retry
    retried = str(again["messages"][-1]["content"])
    assert retried == str(first["messages"][-1]["content"])
    assert [text for _, text in framed(retried)] == ["Remember: the key is under the mat\n"]
