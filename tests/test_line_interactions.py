"""An answer to what a running turn waits for reaches it at once, through the real gateway:
never queued behind that turn (Slack and Discord want a press acknowledged within 3 s; the
channel acknowledges at receipt, and the core must not then keep the answer waiting)."""

from __future__ import annotations

import asyncio
import re

import pytest

from nanomem.features.dream import Dreaming
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider, call, text
from tests.conftest import make_app
from tests.helpers.dream import LEARN, app_with_history
from tests.helpers.line_channel import LineChannel
from tests.helpers.line_people import connect, running

SOON_S = 3.0  # at once, give or take a loaded machine; the turns below take far longer


async def test_a_shell_approval_typed_while_the_turn_waits_reaches_it_at_once(home: Home) -> None:
    provider = ScriptedProvider([call("exec", {"command": "echo approved"}), text("It ran.")])
    tools = {"shell_enabled": True, "shell_approval_timeout_s": 60, "shell_sandbox": "off"}
    channel = LineChannel(owner="ada")
    async for _ in running(make_app(home, provider, tools=tools, gateway={"port": 0}), channel):
        ada = await connect(channel, "ada")
        await ada.say("run it")
        question = await ada.hear()  # no buttons: the choices are written as commands
        allow = re.search(r"Allow once: (/shell-allow \S+)", question["text"])
        assert allow is not None, question
        started = asyncio.get_running_loop().time()
        await ada.say(allow.group(1))
        heard = [(await ada.hear())["text"] for _ in range(2)]
        assert asyncio.get_running_loop().time() - started < SOON_S
        assert "It ran." in heard and any("Allowed once" in h for h in heard)


@pytest.mark.slow
async def test_a_dream_review_answer_does_not_wait_for_a_long_turn(home: Home) -> None:
    provider = ScriptedProvider(LEARN)
    app = await app_with_history(
        home, provider, dream={"review": "ask", "enabled": False}, gateway={"port": 0}
    )
    pending = (await app.feature(Dreaming).dream.run("cron")).pending
    assert pending is not None
    channel = LineChannel(owner="ada")
    async for _ in running(app, channel):
        ada = await connect(channel, "ada")
        assert (await ada.hear())["text"].startswith("Dream prepared")
        provider.latency = 4 * SOON_S  # the next turn is a long one
        await ada.say("think long about it")
        await asyncio.sleep(0.3)  # the turn is running
        started = asyncio.get_running_loop().time()
        await ada.say(f"/dream-approve {pending.id}")
        answer = await ada.hear()
        assert asyncio.get_running_loop().time() - started < SOON_S
        assert answer["style"] == "command" and "pprove" in answer["text"]
        assert (await ada.hear())["text"].endswith("think long about it")  # the turn, after
