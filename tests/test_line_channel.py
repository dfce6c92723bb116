"""The worked example of docs/channels.md (tests/helpers/line_channel.py) in the real gateway:
a channel written against the contract alone, over raw loopback sockets."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from nanomem.agent.markup import plain_text
from nanomem.features.dream import Dreaming
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider, call, text
from tests.conftest import make_app
from tests.helpers import until
from tests.helpers.dream import LEARN, app_with_history
from tests.helpers.line_channel import LineChannel
from tests.helpers.line_people import connect, running


@pytest.fixture
async def served(home: Home) -> AsyncIterator[LineChannel]:
    app = make_app(home, ScriptedProvider(latency=0.2), gateway={"port": 0})
    channel = LineChannel(owner="ada")
    async for _ in running(app, channel):
        yield channel


async def test_a_message_is_answered_on_its_connection(served: LineChannel) -> None:
    ada = await connect(served, "ada")
    await ada.say("hello there")
    heard = await ada.hear()  # the scripted model echoes what it was sent
    assert heard["style"] == "reply" and heard["text"].endswith("\n\nhello there")
    await ada.say("/help")
    helped = await ada.hear()
    assert helped["style"] == "command" and "/new" in helped["text"]


async def test_a_chat_s_replies_come_in_order_and_chats_do_not_wait(
    served: LineChannel,
) -> None:
    ada, bea = await connect(served, "ada"), await connect(served, "bea")
    for n in range(3):
        await ada.say(f"ada {n}")
    await bea.say("bea 0")
    assert (await bea.hear())["text"].endswith("bea 0")  # not behind ada's three turns
    heard = [(await ada.hear())["text"].rsplit("\n", 1)[-1] for _ in range(3)]
    assert heard == [f"ada {n}" for n in range(3)]


async def test_only_the_owner_runs_owner_commands(served: LineChannel) -> None:
    bea = await connect(served, "bea")
    await bea.say("/dream-restore")
    refused = await bea.hear()
    assert refused["style"] == "error" and "Only the owner" in refused["text"]


@pytest.mark.slow
async def test_the_owner_is_told_of_a_dream_change_with_choices_as_text(home: Home) -> None:
    # The line channel has no buttons: the core lists the choices in the text instead.
    app = await app_with_history(
        home,
        ScriptedProvider(LEARN),
        dream={"review": "ask", "enabled": False},
        gateway={"port": 0},
    )
    assert (await app.feature(Dreaming).dream.run("cron")).pending is not None
    channel = LineChannel(owner="ada")
    async for _ in running(app, channel):
        ada = await connect(channel, "ada")
        told = await ada.hear()
        assert told["text"].startswith("Dream prepared")
        assert "\nApprove: /dream-approve " in told["text"]


@pytest.mark.slow
async def test_a_dream_change_waits_for_the_owner_to_be_reachable_and_is_told_once(
    home: Home,
) -> None:
    # The Dream feature says it through the owner outlet the gateway gives it: while no
    # channel reaches the owner (ada is not connected), nobody is told, not even bea.
    app = await app_with_history(
        home,
        ScriptedProvider(LEARN, latency=0.2),
        dream={"review": "ask", "enabled": False},
        gateway={"port": 0},
    )
    dreaming = app.feature(Dreaming)
    assert (await dreaming.dream.run("cron")).pending is not None
    dreaming.notice.check_s = 0.05  # many checks while ada is away
    channel = LineChannel(owner="ada")
    async for _ in running(app, channel):
        bea = await connect(channel, "bea")
        await bea.say("anyone there?")
        assert (await bea.hear())["text"].endswith("\n\nanyone there?")  # the first she hears
        ada = await connect(channel, "ada")
        told = await ada.hear()
        assert told["text"].startswith("Dream prepared")
        assert "\nApprove: /dream-approve " in told["text"]
        pending = await until(lambda: (p := dreaming.dream.review.peek()) and p.notified and p)
        # In the channel's form: its markup is plain, so the Markdown of the notice is gone.
        assert told["text"].startswith(plain_text(pending.describe().split("\n")[0]))
        ada.writer.close()
        again = await connect(channel, "ada")  # a new connection: a new private chat
        await again.say("still there?")
        assert (await again.hear())["text"].endswith("\n\nstill there?")  # not told twice


async def test_the_model_s_markdown_arrives_as_plain_text_split_within_the_limit(
    home: Home,
) -> None:
    paragraphs = [f"Paragraph {n}: " + "word " * 30 for n in range(4)]
    reply = "**Bold** and a [link](https://example.org).\n\n" + "\n\n".join(paragraphs)
    app = make_app(home, ScriptedProvider([text(reply)]), gateway={"port": 0})
    channel = LineChannel(owner="ada", max_chars=200)
    async for _ in running(app, channel):
        ada = await connect(channel, "ada")
        await ada.say("tell me")
        heard = [await ada.hear() for _ in range(5)]
        assert all(h["style"] == "reply" for h in heard)
        # Cut between paragraphs, each part within the limit; nothing lost, no markers left.
        assert [h["text"] for h in heard] == [
            "Bold and a link (https://example.org).",
            *[p.rstrip() for p in paragraphs],
        ]
        assert all(len(h["text"]) <= 200 for h in heard)


async def test_a_file_reaches_a_channel_without_files_as_a_line_naming_it(home: Home) -> None:
    (home.workspace / "plan.csv").write_text("basil,18:00\n")
    provider = ScriptedProvider(
        [call("send_file", {"path": "plan.csv", "caption": "the plan"}), text("It is sent.")]
    )
    channel = LineChannel(owner="ada")
    async for _ in running(make_app(home, provider, gateway={"port": 0}), channel):
        ada = await connect(channel, "ada")
        await ada.say("send me the plan")
        told = await ada.hear()
        assert told["text"] == (
            "the plan\n\n📎 plan.csv (a file in nanomem's workspace; this chat cannot carry files)"
        )
        assert (await ada.hear())["text"] == "It is sent."
