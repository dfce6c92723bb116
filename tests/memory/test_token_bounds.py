"""Byte bounds stand in for token counts while no decision depends on the exact number."""

from typing import Any

from nanomem.agent.bus import InboundMessage
from nanomem.app import App
from nanomem.audience import Sender
from nanomem.home import Home
from nanomem.memory.tokens import BpeTokenizer, ByteBound, message_tokens
from nanomem.providers.provider import Reply, Usage
from nanomem.providers.scripted import ScriptedProvider
from tests.conftest import make_app


def reply_with_usage(prompt_tokens: int) -> Any:
    def answer(messages: list[dict[str, Any]]) -> Reply:
        return Reply("Noted.", usage=Usage(prompt_tokens, 2), finish_reason="stop")

    return answer


def tokenizer(app: App) -> BpeTokenizer:
    assert isinstance(app.budget.tokenizer, BpeTokenizer)
    return app.budget.tokenizer


def test_utf8_bytes_bound_the_exact_count() -> None:
    exact, bound = BpeTokenizer(), ByteBound()
    texts = ["hi", "Größe und Maß", "日本語のテキスト", "🙂🙂 emoji", "x" * 5000, "\ud800 lone"]
    for text in texts:
        assert exact.count(text) <= bound.count(text), text


async def test_a_small_turn_never_loads_the_tokenizer(home: Home) -> None:
    provider = ScriptedProvider([reply_with_usage(900)])
    app = make_app(home, provider)
    await app.loop.handle(InboundMessage("cli", "direct", "hi", Sender("u")))
    await app.loop.close(grace_s=30)  # the background consolidation check ran too
    assert not app.budget.exact
    assert not tokenizer(app).loaded
    assert app.budget.calibration.factor == 1.1  # a byte bound teaches no ratio


async def test_a_prompt_near_the_trigger_is_counted_exactly(home: Home) -> None:
    app = make_app(home, ScriptedProvider())
    turns = 0
    while not app.budget.exact and turns < 60:
        text = f"Please remember fact number {turns}: " + "some detail " * 100
        await app.loop.handle(InboundMessage("cli", "direct", text, Sender("u")))
        await app.loop.close(grace_s=30)
        turns += 1
    assert app.budget.exact and tokenizer(app).loaded and turns > 3
    # Counts made as bounds were dropped: the session's running total is exact again.
    session = await app.sessions.get("cli:direct")
    assert session.replay_from == 0  # far from consolidating: exact counts are ~4x smaller
    exact = sum(message_tokens(tokenizer(app), m) for m in session.messages)
    assert session.unconsolidated_tokens() == exact


async def test_a_provider_counting_more_than_the_bound_makes_counts_exact(home: Home) -> None:
    provider = ScriptedProvider([reply_with_usage(50_000), reply_with_usage(60_000)])
    app = make_app(home, provider)
    await app.loop.handle(InboundMessage("cli", "direct", "hi", Sender("u")))
    assert app.budget.exact  # the bound is no bound for this provider: calibrate from now on
    before = app.budget.calibration.factor
    await app.loop.handle(InboundMessage("cli", "direct", "and now?", Sender("u")))
    assert app.budget.calibration.factor > before
