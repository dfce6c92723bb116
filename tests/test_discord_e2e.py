"""`nanomem gateway` with the Discord channel in a subprocess: discord.py against the loopback
Discord (its REST API and gateway websocket), litellm against the loopback model server. One
gateway serves most tests; the kills and restarts have their own."""

from __future__ import annotations

import itertools
import re
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from nanomem.home import Home
from tests.fakes.discord_server import GENERAL, FakeDiscord, NotOffered
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.helpers.discord import FRIEND, OWNER, STRANGER, DiscordGateway, said
from tests.helpers.gateway import load_session, onboarded, user_texts

GROWING = "A reply that grows while the model writes it, " * 6
PING = "@everyone look at this, and @here too"
LONG = "\n\n".join(f"Paragraph {n:03d}: " + "lorem ipsum dolor sit amet" * 4 for n in range(60))


def echo(request: dict[str, Any]) -> Step:
    """ "echo: " and the person's words (without the runtime line the core puts first)."""
    words = re.sub(r"^\[runtime [^\]]*\]\n\n", "", user_texts(request)[-1])
    return Step.reply(f"echo: {words}")


def scripted(request: dict[str, Any]) -> Step:
    """The model's answer, chosen by a keyword in the last message (the tests run at once)."""
    last = request["messages"][-1]
    if last.get("role") == "tool":
        return Step.reply(f"result: {last['content']}")
    text = str(last.get("content") or "")
    if "HOLD" in text:  # held until the test calls llm.release()
        return Step.reply("the held answer", hold_after=0)
    if "GROW" in text:
        return Step.reply(GROWING.strip(), pieces=16, pause=0.3)
    if "LONG" in text:
        return Step.reply(LONG)
    if "PING" in text:
        return Step.reply(PING)
    if "SEND " in text:
        return Step.tool_call(
            "send_file", {"path": text.split("SEND ", 1)[1].strip(), "caption": "here it is"}
        )
    if "RUN " in text:
        return Step.tool_call("exec", {"command": text.split("RUN ", 1)[1].strip()})
    return echo(request)


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[FakeDiscord, FakeOpenAI]]:
    with FakeDiscord() as fake, FakeOpenAI() as llm:
        llm.set_fallback(scripted)
        yield fake, llm


@pytest.fixture(scope="module")
def gateway(
    servers: tuple[FakeDiscord, FakeOpenAI], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DiscordGateway]:
    home = onboarded(tmp_path_factory, "discord")
    env = {"NANOMEM_TOOLS__SHELL_ENABLED": "true", "NANOMEM_GATEWAY__GRACE_S": "5"}
    with DiscordGateway(home, *servers, **env) as process:
        yield process


@pytest.fixture
def fake(servers: tuple[FakeDiscord, FakeOpenAI]) -> FakeDiscord:
    return servers[0]


@pytest.fixture
def llm(servers: tuple[FakeDiscord, FakeOpenAI]) -> FakeOpenAI:
    return servers[1]


def asked(llm: FakeOpenAI, word: str) -> list[dict[str, Any]]:
    """Model requests whose last user message contains `word`."""
    return [r for r in llm.requests if word in user_texts(r)[-1]]


def test_a_dm_is_answered_in_its_own_session(
    gateway: DiscordGateway, fake: FakeDiscord, llm: FakeOpenAI
) -> None:
    fake.dm(FRIEND, "hello from a DM")
    dm = fake.dm_channel(FRIEND)
    reply = said(fake, dm, "echo: hello from a DM")
    assert "message_reference" not in reply  # a DM needs no quote
    session = load_session(gateway.home, f"discord:{dm}")
    assert [m["content"] for m in session.messages if m["role"] == "user"][-1].endswith(
        "\n\nhello from a DM"
    )


def test_a_guild_message_is_answered_only_when_mentioned(
    gateway: DiscordGateway, fake: FakeDiscord, llm: FakeOpenAI
) -> None:
    seen = len(fake.sent(GENERAL))
    fake.say(GENERAL, FRIEND, "talking among ourselves")
    asking = fake.say(GENERAL, FRIEND, "what is up", mention=True)
    reply = said(fake, GENERAL, "echo: what is up", seen)  # the mention itself is dropped
    assert reply["message_reference"]["message_id"] == asking["id"]  # quoted: whom it answers
    assert len(fake.sent(GENERAL)) == seen + 1
    assert not asked(llm, "among ourselves")


def test_a_guild_channel_never_sees_the_owners_personal_memory(
    gateway: DiscordGateway, fake: FakeDiscord, llm: FakeOpenAI
) -> None:
    (gateway.home.workspace / "USER.md").write_text("# User\n\nThe owner's secret: kumquat.\n")
    dm = fake.dm_channel(OWNER)
    fake.dm(OWNER, "what do you know of me")
    said(fake, dm, "echo: what do you know of me")
    fake.say(GENERAL, OWNER, "and here?", mention=True)  # the owner, in a server channel
    said(fake, GENERAL, "echo: and here?")
    (private,) = asked(llm, "what do you know of me")
    (shared,) = asked(llm, "and here?")
    assert "kumquat" in str(private["messages"])  # the owner's own DM sees it
    assert "kumquat" not in str(shared["messages"])  # a server channel never does


def test_a_thread_is_a_session_of_its_own(
    gateway: DiscordGateway, fake: FakeDiscord, llm: FakeOpenAI
) -> None:
    thread = fake.thread(GENERAL, "planning")
    fake.say(thread, OWNER, "in the thread", mention=True)
    said(fake, thread, "echo: in the thread")
    in_thread = load_session(gateway.home, f"discord:{thread}")
    said_there = [m["content"] for m in in_thread.messages if m["role"] == "user"]
    assert len(said_there) == 1 and said_there[0].endswith("\n\nin the thread")
    in_channel = load_session(gateway.home, f"discord:{GENERAL}")
    assert not any("in the thread" in str(m["content"]) for m in in_channel.messages)


def test_a_slash_command_is_acknowledged_at_once_even_behind_a_long_turn(
    gateway: DiscordGateway, fake: FakeDiscord, llm: FakeOpenAI
) -> None:
    dm = fake.dm_channel(OWNER)
    fake.dm(OWNER, "HOLD this one")
    fake.wait(lambda: asked(llm, "HOLD this one"))  # the chat's turn runs, held
    interaction = fake.slash(dm, OWNER, "help")
    # The fake refuses a callback later than 3 s, as Discord does: a response at all is in time.
    deferred = fake.wait(lambda: fake.responses(interaction))
    assert deferred[0]["type"] == 5  # "thinking…", then the answer replaces it
    answer = fake.wait(lambda: next((m for m in fake.sent(dm) if m.get("webhook")), None))
    assert answer["content"].startswith("Commands:")
    assert "/dream-log" in answer["content"]  # named as the slash commands are
    llm.release()
    said(fake, dm, "the held answer")
    names = {c["name"] for c in fake.commands}
    assert {"help", "new", "stop", "dream-log"} <= names and "shell-allow" not in names


def test_slash_commands_are_offered_in_servers_and_the_bots_dm_only(
    gateway: DiscordGateway, fake: FakeDiscord
) -> None:
    """Registered for servers and the bot's DM as a server-installed app: Discord offers them
    there, never in a group DM (whose people may not be the ones the bot serves)."""
    fake.wait(lambda: fake.commands)
    assert all(c.get("contexts") == [0, 1] for c in fake.commands), fake.commands
    assert all(c.get("integration_types") == [0] for c in fake.commands)
    with pytest.raises(NotOffered):
        fake.slash(fake.group_dm(OWNER, FRIEND), OWNER, "help")
    in_server = fake.slash(GENERAL, OWNER, "help")  # offered in a server: answered
    assert fake.wait(lambda: fake.responses(in_server))[0]["type"] == 5


def test_a_button_press_is_acknowledged_at_once_while_its_turn_waits(
    gateway: DiscordGateway, fake: FakeDiscord, llm: FakeOpenAI
) -> None:
    dm = fake.dm_channel(OWNER)
    fake.dm(OWNER, "RUN echo approved")
    question = said(fake, dm, "Run this command?\n\n```\necho approved\n```")
    buttons = question["components"][0]["components"]
    assert [b["label"] for b in buttons] == ["Allow once", "Always allow echo", "Deny"]
    allow = buttons[0]["custom_id"]

    stranger = fake.press(dm, STRANGER, question["id"], allow)
    assert fake.wait(lambda: fake.ephemeral(stranger)) == [
        "Only the people this bot serves can use it."
    ]
    friend = fake.press(dm, FRIEND, question["id"], allow)
    assert fake.wait(lambda: fake.ephemeral(friend)) == [
        "Only the person who was asked can answer this."
    ]

    pressed = fake.press(dm, OWNER, question["id"], allow)
    acknowledged = fake.wait(lambda: fake.responses(pressed))  # within 3 s, or refused
    assert acknowledged[0]["type"] == 7  # the pressed message changes at once:
    assert fake.message(dm, question["id"])["components"] == []  # its buttons go
    fake.wait(lambda: any(m["content"].startswith("result: exit code 0") for m in fake.sent(dm)))


def test_a_stranger_is_ignored_and_named_once_in_the_log(
    gateway: DiscordGateway, fake: FakeDiscord, llm: FakeOpenAI
) -> None:
    fake.dm(STRANGER, "let me in")
    fake.dm(STRANGER, "please")
    dm = fake.dm_channel(STRANGER)
    refused = fake.slash(dm, STRANGER, "help")
    assert fake.wait(lambda: fake.ephemeral(refused))  # told, in a note only they see
    fake.dm(FRIEND, "after the stranger")
    said(fake, fake.dm_channel(FRIEND), "echo: after the stranger")
    assert fake.sent(dm) == []
    assert not asked(llm, "let me in") and not asked(llm, "please")
    named = [line for line in gateway.lines if f"refused Discord user {STRANGER}" in line]
    assert len(named) == 1


def test_a_long_reply_goes_in_parts_within_discords_limit(
    gateway: DiscordGateway, fake: FakeDiscord, llm: FakeOpenAI
) -> None:
    dm = fake.dm_channel(FRIEND)
    seen = len(fake.sent(dm))
    fake.dm(FRIEND, "LONG one please")
    fake.wait(lambda: any("Paragraph 059" in m["content"] for m in fake.sent(dm)[seen:]))
    parts = [m["content"] for m in fake.sent(dm)[seen:]]
    assert len(parts) >= 3 and all(len(p) <= 2000 for p in parts)
    assert "\n\n".join(parts) == LONG  # split between paragraphs, nothing lost or doubled


def test_everyone_in_the_models_text_pings_nobody(
    gateway: DiscordGateway, fake: FakeDiscord, llm: FakeOpenAI
) -> None:
    seen = len(fake.sent(GENERAL))
    fake.say(GENERAL, FRIEND, "PING them all", mention=True)
    reply = fake.wait(lambda: next(iter(fake.sent(GENERAL)[seen:]), None))
    assert reply["content"].replace("\u200b", "") == PING  # shown as written, to the eye
    assert "@everyone" not in reply["content"] and "@here" not in reply["content"]
    assert reply["mention_everyone"] is False
    assert reply["allowed_mentions"] == {"parse": [], "replied_user": False}


def test_a_reply_grows_in_one_message_by_edits(
    gateway: DiscordGateway, fake: FakeDiscord, llm: FakeOpenAI
) -> None:
    dm = fake.dm_channel(OWNER)
    seen = len(fake.sent(dm))
    fake.dm(OWNER, "GROW please")
    reply = said(fake, dm, GROWING.strip(), seen)
    assert len(fake.sent(dm)) == seen + 1  # one message, edited as it grew
    growing = reply.get("edits", [])[:-1]  # the last edit makes it the whole reply
    assert len(growing) >= 2
    assert all(b - a >= 1.0 for a, b in itertools.pairwise(growing))  # at a bounded rate


def test_a_file_a_person_sends_reaches_the_turn(
    gateway: DiscordGateway, fake: FakeDiscord, llm: FakeOpenAI
) -> None:
    notes = fake.attach("notes.txt", b"the notes")
    fake.dm(FRIEND, "read this", attachments=[notes])
    dm = fake.dm_channel(FRIEND)
    fake.wait(lambda: any("read this" in m["content"] for m in fake.sent(dm)))
    (request,) = asked(llm, "read this")
    assert "[file: notes.txt]" in user_texts(request)[-1]
    assert "the notes" in user_texts(request)[-1]  # the file itself, read for the model
    saved = list((gateway.home.workspace / "media").glob("*notes.txt"))  # a DM's: personal
    assert [p.read_bytes() for p in saved] == [b"the notes"]


def test_a_file_the_agent_sends_arrives_as_an_attachment(
    gateway: DiscordGateway, fake: FakeDiscord, llm: FakeOpenAI
) -> None:
    (gateway.home.workspace / "report.csv").write_text("a,b\n1,2\n")
    dm = fake.dm_channel(OWNER)
    fake.dm(OWNER, "SEND report.csv")
    sent = fake.wait(lambda: [m for m in fake.sent(dm) if m["attachments"]])
    (attachment,) = sent[0]["attachments"]
    assert attachment["filename"] == "report.csv" and sent[0]["content"] == "here it is"
    assert fake.file(attachment) == b"a,b\n1,2\n"


def test_a_file_sent_in_a_server_channel_goes_to_its_own_folder(
    gateway: DiscordGateway, fake: FakeDiscord, llm: FakeOpenAI
) -> None:
    plan = fake.attach("plan.txt", b"the room's plan")
    fake.say(GENERAL, FRIEND, "see the plan", mention=True, attachments=[plan])
    fake.wait(lambda: any("see the plan" in m["content"] for m in fake.sent(GENERAL)))
    room = gateway.home.workspace / "rooms" / f"discord_{GENERAL}" / "media"
    assert [p.read_bytes() for p in room.glob("*plan.txt")] == [b"the room's plan"]
    assert not list((gateway.home.workspace / "media").glob("*plan.txt"))


def test_a_kill_mid_reply_loses_nothing_and_doubles_nothing(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    held: list[str] = []

    def once_held(request: dict[str, Any]) -> Step:
        """The first HOLD is held (the run is killed meanwhile); its replay is answered."""
        if "HOLD" in user_texts(request)[-1] and not held:
            held.append("held")
            return Step.reply("the held answer", hold_after=0)
        return (
            Step.reply("the held answer") if "HOLD" in user_texts(request)[-1] else (echo(request))
        )

    with FakeDiscord() as fake, FakeOpenAI() as llm:
        llm.set_fallback(once_held)
        home: Home = onboarded(tmp_path_factory, "discord-kill")
        first = DiscordGateway(home, fake, llm)
        fake.say(GENERAL, FRIEND, "before", mention=True)  # the guild channel is known now
        said(fake, GENERAL, "echo: before")
        dm = fake.dm_channel(FRIEND)
        fake.dm(FRIEND, "HOLD the first")
        fake.wait(lambda: asked(llm, "HOLD the first"))
        fake.wait(lambda: [c for c, _ in fake.typing if c == dm])  # "typing…" while it runs
        first.stop(signal.SIGKILL)
        fake.wait(lambda: not fake.connected())
        fake.dm(FRIEND, "while it was down")  # Discord never redelivers this one
        fake.say(GENERAL, FRIEND, "down, in the guild", mention=True)
        fake.say(GENERAL, FRIEND, "down, not for us")
        llm.release()  # the killed run's request ends; its answer went nowhere
        with DiscordGateway(home, fake, llm) as second:
            said(fake, dm, "the held answer")
            said(fake, dm, "echo: while it was down")
            said(fake, GENERAL, "echo: down, in the guild")
            fake.dm(FRIEND, "after the restart")
            said(fake, dm, "echo: after the restart")
            contents = [m["content"] for m in fake.sent(dm)]
            assert contents == ["the held answer", "echo: while it was down",
                                "echo: after the restart"]  # fmt: skip
            in_guild = [m["content"] for m in fake.sent(GENERAL)]
            assert in_guild == ["echo: before", "echo: down, in the guild"]
            assert not asked(llm, "not for us")
            assert any("came in" in line for line in second.lines)


def test_a_bot_without_the_content_intent_says_so_in_health(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with FakeDiscord(content_intent=False) as fake, FakeOpenAI() as llm:
        home = onboarded(tmp_path_factory, "discord-intent")
        with DiscordGateway(home, fake, llm, connects=False) as gateway:
            gateway.wait_for_line("discord: the bot may not read messages: turn on the MESSAGE")
            status, health = gateway.health()
            assert status == 503 and "MESSAGE CONTENT intent" in str(health)


def test_a_slash_command_is_acknowledged_while_the_catch_up_reads_history(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """After a restart the READY catch-up reads the history of the channels last heard from,
    and Discord answers it slowly: a slash command meanwhile is still acknowledged within
    Discord's 3 s (the fake refuses a later callback), and the catch-up still finds what came."""
    with FakeDiscord() as fake, FakeOpenAI() as llm:
        llm.set_fallback(echo)
        home: Home = onboarded(tmp_path_factory, "discord-catch-up")
        dm = fake.dm_channel(OWNER)
        with DiscordGateway(home, fake, llm):
            fake.dm(OWNER, "before")
            said(fake, dm, "echo: before")
        fake.dm(OWNER, "while it was down")
        fake.history_s = 6.0
        read = len(fake.requests)
        with DiscordGateway(home, fake, llm):
            fake.wait(lambda: any(p.endswith("/messages") and m == "GET"
                                  for m, p, _ in fake.requests[read:]))  # fmt: skip
            interaction = fake.slash(dm, OWNER, "help")
            assert fake.wait(lambda: fake.responses(interaction), timeout=10)[0]["type"] == 5
            said(fake, dm, "echo: while it was down")


def test_a_slash_command_thinking_when_killed_is_finished_by_its_answer_after_the_restart(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """/new waits behind a held turn, answered "thinking…"; the gateway is killed. After the
    restart its answer replaces that "thinking…" (the interaction's token, kept in the inbox,
    lives 15 minutes) instead of coming as a message beside one left thinking for ever."""
    held: list[str] = []

    def once_held(request: dict[str, Any]) -> Step:
        if "HOLD" in user_texts(request)[-1] and not held:
            held.append("held")
            return Step.reply("the held answer", hold_after=0)
        return Step.reply("the held answer") if held else echo(request)

    with FakeDiscord() as fake, FakeOpenAI() as llm:
        llm.set_fallback(once_held)
        home: Home = onboarded(tmp_path_factory, "discord-thinking")
        first = DiscordGateway(home, fake, llm)
        dm = fake.dm_channel(OWNER)
        fake.dm(OWNER, "HOLD before the command")
        fake.wait(lambda: asked(llm, "HOLD before the command"))
        interaction = fake.slash(dm, OWNER, "new")  # behind the held turn
        assert fake.wait(lambda: fake.responses(interaction))[0]["type"] == 5  # "thinking…"
        first.stop(signal.SIGKILL)
        fake.wait(lambda: not fake.connected())
        llm.release()
        with DiscordGateway(home, fake, llm):
            said(fake, dm, "the held answer")
            answer = fake.wait(lambda: next((m for m in fake.sent(dm) if m.get("webhook")), None))
            assert fake.original(interaction) == answer["id"]  # "thinking…" became the answer
            time.sleep(0.5)
            assert [m["content"] for m in fake.sent(dm)] == ["the held answer", answer["content"]]
