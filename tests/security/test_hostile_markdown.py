"""Markdown written to hurt the renderers (a model or a web page it quoted): deep nesting, a
megabyte of `*`, thousands of links with `javascript:` and raw HTML. Every renderer (Telegram's
and Matrix's HTML, Slack's mrkdwn, Discord's Markdown, plain text) and the core's splitting
finish in time linear in the input, with output a small multiple of it, and pass no markup,
no link of a refused scheme and no mention; through the real gateway, Telegram gets valid HTML
within its limit."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from html.parser import HTMLParser

import pytest

from nanomem.agent.markup import split_text
from nanomem.home import Home
from nanomem.text.discord_markdown import render_discord
from nanomem.text.markdown_html import (
    MATRIX_HTML,
    TELEGRAM_HTML,
    matrix_event_bytes,
    render_html,
    telegram_units,
)
from nanomem.text.markdown_plain import plain_text
from nanomem.text.mrkdwn import render_mrkdwn
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers.gateway import GatewayProcess

BAD_LINK = "[click](javascript:alert(1)) [x](JaVaScRiPt:alert(1)) [d](data:text/html,x) "
HOSTILE = {
    "a megabyte of *": "*" * 1_000_000,
    "emphasis never closed": "*a **b _c " * 10_000,
    "quotes 100,000 deep": ">" * 100_000 + " deep",
    "lists 2,000 deep": "".join("  " * n + "- x\n" for n in range(2_000)),
    "thousands of links": BAD_LINK * 1_000 + '[ok](https://e.org/?q=<b>&c="d") ' * 1_000,
    "brackets never closed": "[" * 40_000 + "](" * 20_000,
    "raw html": '<script>alert(1)</script><img src=x onerror="alert(1)"><a href="javascript:x">'
    * 1_000,
    "a table padded by one long cell": "| a | b |\n|---|---|\n| "
    + "x" * 20_000
    + " | y |\n"
    + "| 1 | 2 |\n" * 5_000,
    "mentions": "@everyone <@123> <@&45> <#67> <!channel> <!here> @here " * 2_000,
    "fences by the thousand": "```\n" * 20_000,
}
RENDERERS: dict[str, Callable[[str], str]] = {
    "telegram": lambda md: render_html(md, TELEGRAM_HTML),
    "matrix": lambda md: render_html(md, MATRIX_HTML),
    "slack": render_mrkdwn,
    "discord": render_discord,
    "plain": plain_text,
}
SECONDS = 30.0  # each takes about a second here; a quadratic one would take hours


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.seen: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.seen.append((tag, attrs))


def assert_no_markup_passed(name: str, out: str) -> None:
    if name in ("telegram", "matrix"):
        tags = Tags()
        tags.feed(out)
        allowed = TELEGRAM_HTML.tags if name == "telegram" else MATRIX_HTML.tags
        for tag, attrs in tags.seen:
            assert tag in allowed, tag
            for attr, value in attrs:
                assert attr in ("href", "class", "start"), (tag, attr)
                if attr == "href":
                    assert str(value).startswith(("https://", "http://", "mailto:")), value
    elif name == "slack":  # no < but the links we made, each opening http(s)
        assert all(m.startswith(("<https://", "<http://")) for m in re.findall(r"<[^>]*", out))
    elif name == "discord":
        assert not re.search(r"@(everyone|here)|<[@#]", out)
        assert not re.search(r"(?<!\\)\]\((?!https?://)", out)  # a link of ours


@pytest.mark.parametrize("renderer", sorted(RENDERERS))
@pytest.mark.parametrize("attack", sorted(HOSTILE))
def test_hostile_markdown_is_rendered_in_bounded_time_and_size(attack: str, renderer: str) -> None:
    markdown = HOSTILE[attack]
    began = time.perf_counter()
    out = RENDERERS[renderer](markdown)
    assert time.perf_counter() - began < SECONDS
    assert len(out) <= 6 * len(markdown) + 1_000, len(out)
    assert_no_markup_passed(renderer, out)


@pytest.mark.parametrize("attack", sorted(HOSTILE))
def test_hostile_markdown_is_split_by_a_rendering_measure_in_bounded_calls(attack: str) -> None:
    markdown = HOSTILE[attack][:60_000]
    calls = 0

    def measure(piece: str) -> int:
        nonlocal calls
        calls += 1
        return telegram_units(piece)

    began = time.perf_counter()
    pieces = split_text(markdown, 4096, measure)
    assert time.perf_counter() - began < 4 * SECONDS
    assert all(telegram_units(p) <= 4096 or len(p) == 1 for p in pieces)
    # A few measures per piece, and pieces hold most of a message each.
    assert calls <= 12 * len(pieces) + 2 * markdown.count("```") // 2 + 10, (calls, len(pieces))


# Text with no place a reader would pause, each kind of character the splitter must not cut
# inside; each is a few Matrix events' worth at the limit below.
UNBREAKABLE = {
    "no spaces or newlines, every character escaped": "‹é>" * 6_000,
    "html and json escapes only": '&<>"' * 4_500,
    "one huge code line": "```\n" + "x<&\\" * 4_500 + "\n```",
    "combining marks on one letter": "e" + "\u0301" * 18_000,
    "joiners on one letter": "a" + "\u200d" * 18_000,
    "variation selectors on one letter": "a" + "\ufe0f" * 18_000,
    "backslashes": "\\" * 18_001 + "*x*",
    "emoji joined to emoji": "\U0001f469\u200d" * 6_000,
}
EVENT = 8_000  # Matrix's measure; small, so that a text makes several events


@pytest.mark.parametrize("attack", sorted(UNBREAKABLE))
def test_unbreakable_text_is_split_by_matrix_measure_in_linear_work(attack: str) -> None:
    text = UNBREAKABLE[attack]
    budget = 16 * len(text) + 4 * EVENT  # characters measured: a few passes over the text
    work = 0

    def measure(piece: str) -> int:
        nonlocal work
        work += len(piece)
        assert work <= budget, "quadratic: pieces far smaller than an event, each measured"
        return matrix_event_bytes(piece)

    pieces = split_text(text, EVENT, measure)
    assert all(matrix_event_bytes(p) <= EVENT for p in pieces)
    assert len(pieces) <= 2 * matrix_event_bytes(text) // EVENT + 2  # full events, not crumbs


@pytest.mark.slow
def test_a_hostile_reply_reaches_telegram_as_valid_html_within_its_limit(home: Home) -> None:
    reply = (
        "Start.\n\n"
        + BAD_LINK * 500
        + "\n\n"
        + ">" * 5_000
        + " deep\n\n"
        + "<script>alert(1)</script>\n\n"
        + "*a **b _c " * 2_000
        + "\n\n```\n"
        + "code <b>&amp;\n" * 2_000
        + "```\n\nEND"
    )
    with FakeTelegram() as telegram, FakeOpenAI() as llm:
        llm.reply(reply)
        with GatewayProcess(home, telegram, llm) as gateway:
            telegram.send_text(1001, "hello")
            got = telegram.wait_for_messages(1001, 1, timeout=60)
            deadline = time.monotonic() + 60
            while not got[-1]["text"].endswith("END") and time.monotonic() < deadline:
                time.sleep(0.2)
                got = telegram.sent_messages(1001)
            assert got[-1]["text"].endswith("END")
            # The fake refuses HTML Telegram would refuse and text past 4,096 UTF-16 units.
            assert len(got) > 2 and all("html" in m for m in got)  # none fell back to plain
            html = "".join(m["html"] for m in got)
            assert "javascript:" not in html.lower() and "<script" not in html
            assert "data:" not in re.sub(r"&[^;]*;|[^<]*", "", html)
        log = "".join(gateway.lines)
    assert "Traceback" not in log
