"""The shared rate gate: a platform's flood waits per chat and channel-wide, a pace, and whole
messages ahead of edits."""

from __future__ import annotations

import asyncio
import time

from nanomem.agent.rate_gate import HELD_S, RateGate


async def test_a_flood_wait_binds_its_chat_only_and_a_channel_wide_one_binds_all() -> None:
    gate = RateGate()
    gate.block("1", 0.3)
    assert gate.wait_s("1") > 0.2 and gate.wait_s("2") == 0
    began = time.monotonic()
    async with gate.reply("2"):  # another chat: at once
        assert time.monotonic() - began < 0.1
    async with gate.reply("1"):  # its own: after the wait
        assert time.monotonic() - began >= 0.3
    gate.block(None, 0.2)
    assert gate.wait_s("2") > 0.1 and gate.edit_in_s("3") > 0.1


async def test_the_channel_pace_spaces_calls_across_chats() -> None:
    gate = RateGate(per_s=20)  # one call every 50 ms
    began = time.monotonic()
    for chat in ("1", "2", "3", "4", "5"):
        async with gate.reply(chat):
            pass
    assert time.monotonic() - began >= 0.2  # five calls: four gaps


async def test_the_channel_edit_pace_spaces_edits_across_chats_never_replies() -> None:
    gate = RateGate(edits_per_s=1)  # one edit a second, whichever chat
    assert gate.edit_in_s("1") == 0
    gate.edited("1", 0.0)
    assert gate.edit_in_s("2") > 0.5  # another chat's edit waits its turn
    gate.edited("2", 0.0)  # one that goes anyway (shown late) moves the next one further
    assert gate.edit_in_s("3") > 1.5
    began = time.monotonic()
    async with gate.reply("2"):  # a whole message never waits for the edits' pace
        assert time.monotonic() - began < 0.1


async def test_a_reply_never_waits_behind_edits_and_edits_wait_for_it() -> None:
    gate = RateGate()
    gate.edited("1", 10.0)  # the chat's edits are paced to one in 10 s
    assert gate.edit_in_s("1") > 9
    began = time.monotonic()
    async with gate.reply("1"):  # the edit pace never holds a reply back
        assert time.monotonic() - began < 0.1
        gate.edited("2", 0.0)
        assert gate.edit_in_s("1") >= HELD_S  # an edit gives way while the reply goes
        assert gate.edit_in_s("2") == 0  # another chat's edit does not
    waiting = asyncio.create_task(gate.replies_sent("1"))
    await asyncio.wait_for(waiting, 1)


async def test_an_idle_chat_is_forgotten_and_a_blocked_one_remembered() -> None:
    gate = RateGate()
    gate.block("1", 60)
    async with gate.reply("2"):
        pass
    gate.forget("1")
    assert gate.wait_s("1") > 59  # its flood wait must bind the next send too
    assert list(gate._chats) == ["1"]  # the chat that only sent left nothing behind
