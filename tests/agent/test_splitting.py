"""A long reply split by the channel's measure (`Capabilities.measure`): where a reader would
pause, code blocks whole or closed and reopened, within the limit as the channel counts it, at a
cost linear in the reply's length."""

from __future__ import annotations

import random

import pytest
from markdown_it import MarkdownIt

from nanomem.agent.channel import Capabilities, forms
from nanomem.agent.markup import split_text
from nanomem.agent.outbound import Button, OutboundMessage, Text
from nanomem.text.markdown_html import matrix_event_bytes, telegram_units
from nanomem.text.measure import utf16_units

PARSER = MarkdownIt("commonmark")


def code_of(piece: str) -> list[tuple[str, str]]:
    """(info, code) of every code block in a piece, as a Markdown renderer reads it."""
    return [(t.info, t.content) for t in PARSER.parse(piece) if t.type == "fence"]


def code_block(lines: int, info: str = "python") -> str:
    return (
        f"```{info}\n"
        + "\n".join(f"    value_{n} = {n}  # step {n}" for n in range(lines))
        + "\n```"
    )


def test_a_code_block_that_fits_one_message_is_never_cut() -> None:
    block = code_block(6)  # about 200 characters
    text = "word " * 50 + "\n" + block + "\n" + "more " * 40
    pieces = split_text(text, 260)
    holding = [p for p in pieces if "value_0" in p]
    assert len(holding) == 1 and block in holding[0]
    assert all(len(p) <= 260 for p in pieces)


def test_a_code_block_longer_than_a_message_is_closed_and_reopened_between_lines() -> None:
    block = code_block(60, "c++")
    pieces = split_text("Here is the code:\n\n" + block + "\n\nThat was it.", 300)
    assert len(pieces) > 5 and all(len(p) <= 300 for p in pieces)
    blocks = [code for piece in pieces for code in code_of(piece)]
    # Every piece with code shows it as code, under the same info string, cut between lines.
    assert {info for info, _ in blocks} == {"c++"}
    assert "".join(code for _, code in blocks) == code_of(block)[0][1]
    assert all(code.endswith("\n") and code.startswith("    value_") for _, code in blocks)


def test_a_fence_in_a_list_item_or_a_quote_is_reopened_inside_it() -> None:
    item = "- steps:\n  ```sh\n" + "\n".join(f"  echo {n}" for n in range(30)) + "\n  ```"
    quote = "> ```\n" + "\n".join(f"> quoted {n}" for n in range(30)) + "\n> ```"
    for text in (item, quote):
        pieces = split_text(text, 120)
        assert len(pieces) > 2
        assert all(code_of(piece) or "```" not in piece for piece in pieces)
        assert sum(len(code.splitlines()) for p in pieces for _, code in code_of(p)) == 30


def test_pieces_fit_by_the_channels_measure_not_by_characters() -> None:
    text = "\n\n".join("😀 " * 40 + f"paragraph {n}" for n in range(20))  # 2 units an emoji
    pieces = split_text(text, 200, utf16_units)
    assert all(utf16_units(p) <= 200 for p in pieces)
    assert max(len(p) for p in pieces) < 200  # characters alone would have made them too long
    assert [p.split()[-1] for p in pieces if p.startswith("😀")][-1] == "19"


@pytest.mark.parametrize(("measure", "limit"), [(telegram_units, 500), (matrix_event_bytes, 900)])
def test_a_measure_that_renders_first_is_held_to(measure: object, limit: int) -> None:
    rng = random.Random(5)
    words = ["**bold**", "[link](https://example.org/a?b=1&c=2)", "<b>raw</b>", "é", "plain"]
    text = "\n\n".join(
        " ".join(rng.choice(words) for _ in range(rng.randint(5, 60))) for _ in range(30)
    )
    text += "\n\n" + code_block(80, "js")
    pieces = split_text(text, limit, measure)  # type: ignore[arg-type]
    assert all(measure(p) <= limit for p in pieces)  # type: ignore[operator]
    assert sum(p.count("value_") for p in pieces) == 80


def test_a_hard_cut_never_breaks_a_character_an_escape_or_an_entity() -> None:
    family = "👩\u200d👩\u200d👧"  # one person sees one emoji: four code points and two joiners
    for text, keep in [
        (family * 30, family),
        ("e\u0301" * 60, "e\u0301"),
        ("\\*" * 60, "\\*"),
        ("&amp;" * 40, "&amp;"),
    ]:
        for limit in range(7, 23):
            pieces = split_text(text, limit)
            assert "".join(pieces) == text
            assert all(p.startswith(keep[0]) and p.endswith(keep[-1]) for p in pieces), pieces
    escapes = "\\" * 41 + "*"  # twenty escaped backslashes, then an escaped star
    for limit in range(7, 23):
        pieces = split_text(escapes, limit)
        assert "".join(pieces) == escapes
        assert all(len(p) % 2 == 0 for p in pieces[:-1]), pieces  # no pair cut apart


def test_measuring_costs_about_linearly_in_the_replys_length() -> None:
    rng = random.Random(11)

    def reply(size: int) -> str:
        blocks: list[str] = []
        while sum(map(len, blocks)) < size:
            if rng.random() < 0.2:
                blocks.append(code_block(rng.randint(1, 300), "py"))
            else:
                blocks.append(
                    " ".join(rng.choice(["alpha", "**b**", "é", "😀"]) for _ in range(200))
                )
        return "\n\n".join(blocks)

    costs = []
    for size in (50_000, 100_000, 200_000):
        text = reply(size)
        calls, measured = 0, 0

        def measure(piece: str) -> int:  # a measure that renders first costs its length
            nonlocal calls, measured
            calls, measured = calls + 1, measured + len(piece)
            return telegram_units(piece) if len(piece) < 20 else utf16_units(piece)

        pieces = split_text(text, 4096, measure)
        assert all(utf16_units(p) <= 4096 for p in pieces)
        assert calls <= 10 * len(pieces) + 10 and measured <= 12 * len(text)
        costs.append(calls)
    assert costs[2] <= 5 * costs[0]  # 4 times the text: about 4 times the calls, not 16


def test_nothing_is_lost_and_every_piece_fits() -> None:
    rng = random.Random(3)
    for n in range(120):
        markers = [f"m{n}x{k}" for k in range(rng.randint(1, 40))]
        blocks = []
        for marker in markers:
            kind = rng.random()
            if kind < 0.25:
                blocks.append(
                    f"```{rng.choice(['', 'py'])}\n{marker}\n"
                    + "z = 1\n" * rng.randint(0, 30)
                    + "```"
                )
            elif kind < 0.4:
                blocks.append(f"- {marker}\n- " + "word " * rng.randint(1, 50))
            else:
                blocks.append(f"{marker} " + " ".join("word" for _ in range(rng.randint(0, 90))))
        text = "\n\n".join(blocks)
        limit = rng.choice([60, 100, 250, 1000])
        pieces = split_text(text, limit)
        assert all(len(p) <= limit for p in pieces), (limit, pieces)
        joined = "\n".join(pieces)
        positions = [joined.find(m) for m in markers]
        assert -1 not in positions and positions == sorted(positions)
        for piece in pieces:  # a piece with a fence in it shows code (none is left open)
            assert piece.count("```") % 2 == 0, piece


def test_a_channel_that_renders_html_gives_its_measure_and_the_core_splits_markdown() -> None:
    reply = Text(
        "# Notes\n\n" + "x " * 300 + "\n\n" + code_block(40), buttons=(Button("Ok", "/ok"),)
    )
    msg = OutboundMessage("matrix", "!room", reply)
    can = Capabilities(markup="html", buttons=True, max_chars=1200, measure=matrix_event_bytes)
    parts = forms(msg, can)
    assert len(parts) > 1 and all(matrix_event_bytes(p.content) <= 1200 for p in parts)
    assert parts[0].content.startswith("# Notes")  # still the model's Markdown: the channel renders
    assert [p.part.buttons for p in parts][-1] == reply.buttons  # type: ignore[union-attr]
    assert forms(msg, Capabilities(markup="html", buttons=True)) == [msg]  # splits itself


def test_a_paragraph_is_not_cut_inside_a_links_text_or_a_code_span() -> None:
    text = "word " * 10 + "[a link with many words](https://e.org) and `code with spaces` end"
    pieces = split_text(text, 60)
    assert all(len(p) <= 60 for p in pieces)
    assert any(p.startswith("[a link with many words](https://e.org)") for p in pieces)
    assert any("`code with spaces`" in p for p in pieces)
    # Plain text has no such spans: it is cut at the last space that fits.
    assert split_text(text, 60, fences=False)[0].endswith("[a link")
