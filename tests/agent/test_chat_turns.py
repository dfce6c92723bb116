"""The shared per-chat turn bookkeeping: who waits for an answer, the typing indicator, the
replies that grow, and what a stopped turn leaves."""

from __future__ import annotations

import asyncio

from nanomem.agent.chat_turns import Turns, TypingPace
from nanomem.agent.outbound import OutboundMessage, Part, Text, TurnEnded, TurnStarted

FAST = TypingPace(delay_s=0.05, every_s=0.05, silent_max_s=60)


def to(chat: str, inbound: str, part: Part) -> OutboundMessage:
    return OutboundMessage("line", chat, part, inbound)


class Indicator:
    def __init__(self) -> None:
        self.shown: list[str] = []

    async def __call__(self, chat: str) -> None:
        self.shown.append(chat)


async def test_typing_shows_while_a_turn_waits_and_stops_with_its_answer() -> None:
    typing = Indicator()
    turns: Turns[str] = Turns(typing, FAST)
    turns.started(to("1", "a", TurnStarted()))
    turns.started(to("1", "b", TurnStarted("help")))
    await asyncio.sleep(0.2)
    assert typing.shown.count("1") >= 2
    turns.answering(to("1", "b", Text("help text")))
    assert turns.waiting("1") and turns.chat("1").typing is not None  # "a" still waits
    turns.answering(to("1", "a", Text("done")))
    assert turns.chat("1").typing is None
    shown = len(typing.shown)
    await asyncio.sleep(0.15)
    assert len(typing.shown) == shown
    turns.ended(to("1", "a", TurnEnded()))
    turns.forget_if_idle("1")
    assert turns.chats == {}


async def test_a_quick_answer_needs_no_indicator_and_a_silent_turn_stops_getting_one() -> None:
    typing = Indicator()
    turns: Turns[str] = Turns(typing, TypingPace(delay_s=0.2, every_s=0.02, silent_max_s=0.3))
    turns.started(to("quick", "q", TurnStarted()))
    turns.started(to("silent", "s", TurnStarted()))
    turns.answering(to("quick", "q", Text("at once")))
    await asyncio.sleep(0.6)  # past the cap on a silent turn
    assert "quick" not in typing.shown and typing.shown.count("silent") >= 2
    assert turns.chat("silent").typing is None and turns.waiting("silent")


async def test_a_flood_wait_skips_the_indicator_and_a_failure_ends_it() -> None:
    shown: list[str] = []

    async def broken(chat: str) -> None:
        shown.append(chat)
        raise ConnectionError("down")

    quiet = {"1": 10.0}
    turns: Turns[str] = Turns(broken, FAST, lambda chat: quiet.get(chat, 0.0))
    turns.started(to("1", "a", TurnStarted()))
    turns.started(to("2", "b", TurnStarted()))
    await asyncio.sleep(0.2)
    assert shown == ["2"]  # chat 1 waits out a flood limit; chat 2 failed once and stopped
    assert turns.chat("2").typing is None and turns.waiting("2")


async def test_a_reply_grows_for_a_waiting_turn_only_and_a_stopped_one_is_handed_back() -> None:
    turns: Turns[list[str]] = Turns()
    turns.started(to("1", "a", TurnStarted()))
    turns.started(to("1", "stop", TurnStarted("stop")))
    grown = turns.growing(to("1", "a", Text("")), list)
    assert grown == [] and turns.growing(to("1", "a", Text("")), list) is grown
    assert turns.growing(to("1", "gone", Text("")), list) is None  # nobody waits for it
    assert turns.is_turn("1", "a") and not turns.is_turn("1", "stop")
    assert turns.ended(to("1", "a", TurnEnded(stopped=True))) is grown  # left for the channel
    assert turns.answering(to("1", "stop", Text("Stopped."))) is None
    assert not turns.waiting("1") and turns.idle("1")
