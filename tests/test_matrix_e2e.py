"""The Matrix channel end to end: the real `nanomem gateway` in a subprocess against a real
Synapse, and people on it with matrix-nio as their client, through real rooms."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from nanomem.agent import plain_text
from tests.conftest import cli_env, run_cli_here
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.helpers import wait_until
from tests.helpers.gateway import onboarded
from tests.helpers.matrix import Person, bodies, shown
from tests.helpers.matrix_cast import Cast, echo, gateway, said
from tests.helpers.synapse import Synapse, User, synapse
from tests.helpers.synapse_log import AccessLog

pytestmark = pytest.mark.slow
__all__ = ["synapse"]  # the session's homeserver, a fixture


_tags = iter(range(1, 10_000))


@pytest.fixture
def cast(synapse: Synapse) -> Cast:
    return Cast(synapse, str(next(_tags)))


@pytest.fixture
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        server.set_fallback(echo)
        yield server


def joined_by_bot(person: Person, room: str, bot: User) -> None:
    wait_until(lambda: bot.user_id in person.joined(room), timeout=30, what="the bot to join")


def replies(person: Person, room: str, bot: User, count: int) -> list[str]:
    return wait_until(
        lambda: (
            (found := bodies(person.events(room), bot.user_id)) and len(found) >= count and found
        ),
        timeout=60,
        what=f"{count} replies from the bot",
    )


def test_a_dm_is_answered_with_html_and_a_plain_body(
    tmp_path_factory: pytest.TempPathFactory, cast: Cast, llm: FakeOpenAI
) -> None:
    """The owner invites the bot to a DM and writes: the reply is m.text with a plain body and
    an HTML formatted_body, the model's Markdown rendered and its own tags text, not markup."""
    home = onboarded(tmp_path_factory, "dm")
    llm.set_fallback(lambda request: Step.reply("**bold** <b>not markup</b> & fine"))
    with gateway(home, cast, llm):
        room = cast.owner.room(cast.bot.user_id, direct=True)
        joined_by_bot(cast.owner, room, cast.bot)
        cast.owner.say(room, "hello there")
        replies(cast.owner, room, cast.bot, 1)
        content = shown(cast.owner.events(room), cast.bot.user_id)[-1]
    assert content["msgtype"] == "m.text"
    assert content["body"] == "bold <b>not markup</b> & fine"
    assert content["format"] == "org.matrix.custom.html"
    assert (
        content["formatted_body"]
        == "<strong>bold</strong> &lt;b&gt;not markup&lt;/b&gt; &amp; fine"
    )


def test_a_dm_costs_no_member_lookup(
    tmp_path_factory: pytest.TempPathFactory, cast: Cast, llm: FakeOpenAI
) -> None:
    """Whether a room is a DM comes with the sync (the homeserver's room summary counts who
    joined): no request for it, at the first message or later (bench_matrix.py shows what this
    cannot: a lazy-loading sync restates a sender's membership whenever the homeserver's memory
    of what the device was sent lapses, at 100 members a device, which changes nobody's)."""
    home = onboarded(tmp_path_factory, "lookups")
    log = AccessLog(cast.server.folder / "synapse.log")
    with gateway(home, cast, llm, NANOMEM_MATRIX__STREAM="false"):
        room = cast.owner.room(cast.bot.user_id, direct=True)
        joined_by_bot(cast.owner, room, cast.bot)
        cast.owner.say(room, "first")
        replies(cast.owner, room, cast.bot, 1)
        first = log.read(cast.bot.user_id)
        for n in range(3):
            cast.owner.say(room, f"more {n}")
            replies(cast.owner, room, cast.bot, 2 + n)
        later = log.read(cast.bot.user_id)
    assert later.count["send"] == 3  # the replies, each one event
    assert first.count["members"] == later.count["members"] == 0


def test_a_group_room_is_answered_only_when_mentioned(
    tmp_path_factory: pytest.TempPathFactory, cast: Cast, llm: FakeOpenAI
) -> None:
    """In a room of three, a message that does not name the bot is not answered; one that
    mentions it is, and so is `!help` (Element keeps /help for itself)."""
    home = onboarded(tmp_path_factory, "group")
    with gateway(home, cast, llm):
        room = cast.owner.room(cast.bot.user_id, cast.friend.user.user_id)
        cast.friend.join(room)
        joined_by_bot(cast.owner, room, cast.bot)
        cast.friend.say(room, "just chatting among us")
        cast.friend.say(room, f"{cast.bot.user_id}: what is two and two")
        first = replies(cast.owner, room, cast.bot, 1)
        cast.owner.say(room, "!help")
        found = replies(cast.owner, room, cast.bot, 2)
    assert first == ["echo: what is two and two"]
    assert len(llm.requests) == 1  # the unaddressed message never reached the model
    assert "!help" in found[1] or "!" in found[1]


def test_an_open_group_room_answers_everything(
    tmp_path_factory: pytest.TempPathFactory, cast: Cast, llm: FakeOpenAI
) -> None:
    home = onboarded(tmp_path_factory, "open")
    with gateway(home, cast, llm, NANOMEM_MATRIX__GROUP_POLICY="open"):
        room = cast.owner.room(cast.bot.user_id, cast.friend.user.user_id)
        cast.friend.join(room)
        joined_by_bot(cast.owner, room, cast.bot)
        cast.friend.say(room, "no mention here")
        assert replies(cast.owner, room, cast.bot, 1) == ["echo: no mention here"]


def test_strangers_invites_and_messages_are_ignored(
    tmp_path_factory: pytest.TempPathFactory, cast: Cast, llm: FakeOpenAI
) -> None:
    """A stranger's invite is not taken (and named once in the log); in a room the owner
    brought the bot into, the stranger's messages are not answered, mention or not."""
    home = onboarded(tmp_path_factory, "stranger")
    with gateway(home, cast, llm, NANOMEM_MATRIX__GROUP_POLICY="open") as process:
        theirs = cast.stranger.room(cast.bot.user_id, direct=True)
        room = cast.owner.room(cast.bot.user_id, cast.stranger.user.user_id)
        cast.stranger.join(room)
        joined_by_bot(cast.owner, room, cast.bot)
        cast.stranger.say(room, f"{cast.bot.user_id}: answer me")
        cast.owner.say(room, "and me")
        assert replies(cast.owner, room, cast.bot, 1) == ["echo: and me"]
        assert cast.bot.user_id not in cast.stranger.joined(theirs)
        process.wait_for_line(rf"refused Matrix user {cast.stranger.user.user_id} \(an invite\)")
    refused = [line for line in process.lines if cast.stranger.user.user_id in line]
    assert len([line for line in refused if "refused" in line]) == 1  # named once
    assert all(cast.bot.token not in line for line in process.lines)


def test_a_kill_mid_reply_loses_nothing_and_doubles_nothing(
    tmp_path_factory: pytest.TempPathFactory, cast: Cast, llm: FakeOpenAI
) -> None:
    """The gateway is SIGKILLed while the model streams a reply into a DM (held halfway, the
    first time, until the kill): after the restart each message has exactly one reply
    message, showing the whole reply."""
    home = onboarded(tmp_path_factory, "kill")
    asked: list[str] = []

    def slow(request: dict[str, Any]) -> Step:
        first = not asked
        asked.append(said(request))
        return Step.reply(f"answer to {said(request)}: " + "words " * 30, pieces=15, pause=0.1,
                          hold_after=8 if first else None)  # fmt: skip

    llm.set_fallback(slow)
    first = gateway(home, cast, llm)
    room = cast.owner.room(cast.bot.user_id, direct=True)
    joined_by_bot(cast.owner, room, cast.bot)
    for n in range(3):
        cast.owner.say(room, f"question {n}")
    wait_until(
        lambda: bodies(cast.owner.events(room), cast.bot.user_id),
        timeout=60,
        what="a reply to begin growing",
    )
    first.stop(signal.SIGKILL)
    llm.release()  # the killed run's rest goes nowhere
    with gateway(home, cast, llm) as second:
        try:
            found = wait_until(
                lambda: (
                    (b := bodies(cast.owner.events(room), cast.bot.user_id))
                    and len(b) >= 3
                    and all(not x.endswith("…") for x in b)
                    and b
                ),
                timeout=90,
                what="three whole replies",
            )
        except AssertionError:
            for e in cast.owner.events(room):
                print(e.get("sender"), e.get("event_id"), json.dumps(e.get("content"))[:300])
            print("".join(first.lines), "=====", "".join(second.lines))
            raise
    expected = [f"answer to question {n}: " + ("words " * 30).strip() for n in range(3)]
    assert [x.strip() for x in found] == expected


def test_a_long_reply_is_split_within_the_event_limit(
    tmp_path_factory: pytest.TempPathFactory, cast: Cast, llm: FakeOpenAI
) -> None:
    """A reply of 150 kB goes as several messages, each within the homeserver's 64 KiB,
    together the whole reply, its code block whole in one of them."""
    home = onboarded(tmp_path_factory, "long")
    code = "```python\n" + "\n".join(f"x{n} = {n}  # é" for n in range(400)) + "\n```"
    paragraphs = "\n\n".join(f"paragraph {n} " + "é" * 3000 for n in range(50))
    paragraphs = paragraphs.replace("paragraph 20 ", f"{code}\n\nparagraph 20 ")
    llm.set_fallback(lambda request: Step.reply(paragraphs))
    with gateway(home, cast, llm, NANOMEM_MATRIX__STREAM="false"):
        room = cast.owner.room(cast.bot.user_id, direct=True)
        joined_by_bot(cast.owner, room, cast.bot)
        cast.owner.say(room, "write a lot")
        found = wait_until(
            lambda: (
                (b := bodies(cast.owner.events(room), cast.bot.user_id))
                and "paragraph 49" in b[-1]
                and b
            ),
            timeout=60,
            what="the whole long reply",
        )
    assert len(found) >= 3
    events = [e for e in cast.owner.events(room) if e.get("sender") == cast.bot.user_id]
    assert all(len(json.dumps(e, ensure_ascii=False).encode()) <= 65_536 for e in events)
    assert "".join("".join(found).split()) == "".join(plain_text(paragraphs).split())
    html = [c["formatted_body"] for c in shown(cast.owner.events(room), cast.bot.user_id)]
    assert sum("<pre><code" in h and "x0 = 0" in h and "x399 = 399" in h for h in html) == 1


def test_a_group_rooms_privacy_holds_after_a_restart(
    tmp_path_factory: pytest.TempPathFactory, cast: Cast, llm: FakeOpenAI
) -> None:
    """A room of three stays a group after a restart (nio forgets rooms; the channel asks the
    homeserver): a message stored before the kill and replayed after it is answered as a
    group message, its turn never given the owner's personal memory."""
    home = onboarded(tmp_path_factory, "privacy")
    (home.workspace / "USER.md").write_text("The owner's secret: PERSONAL-7731\n")
    first = gateway(home, cast, llm)
    room = cast.owner.room(cast.bot.user_id, cast.friend.user.user_id)
    cast.friend.join(room)
    joined_by_bot(cast.owner, room, cast.bot)
    llm.hang(120)
    cast.owner.say(room, f"{cast.bot.user_id}: tell us")
    wait_until(lambda: llm.requests, timeout=30, what="the turn to reach the model")
    first.stop(signal.SIGKILL)
    llm.clear()
    with gateway(home, cast, llm):
        replies(cast.owner, room, cast.bot, 1)
    for request in llm.requests:
        assert "PERSONAL-7731" not in json.dumps(request)


def test_a_rate_limited_reply_is_delivered_within_the_run(
    tmp_path_factory: pytest.TempPathFactory, cast: Cast, llm: FakeOpenAI
) -> None:
    """The homeserver holds the bot to one message a second: a reply of three parts meets
    M_LIMIT_EXCEEDED (DeliveryLater with the homeserver's wait), and the core sends it again
    within the run: every part arrives once (the parts sent before have the same transaction
    ids, so the homeserver keeps one event each), without a restart."""
    home = onboarded(tmp_path_factory, "limited")
    cast.server.limit_messages(cast.bot.user_id, 1, 1)
    paragraphs = "\n\n".join(f"part {n} " + "x" * 20_000 for n in range(3))
    llm.set_fallback(lambda request: Step.reply(paragraphs))
    with gateway(home, cast, llm, NANOMEM_MATRIX__STREAM="false") as process:
        room = cast.owner.room(cast.bot.user_id, direct=True)
        joined_by_bot(cast.owner, room, cast.bot)
        cast.owner.say(room, "three parts please")
        found = wait_until(
            lambda: (b := bodies(cast.owner.events(room), cast.bot.user_id)) and len(b) >= 3 and b,
            timeout=60,
            what="three parts",
        )
        process.wait_for_line(r"matrix: rate-limited in .*: again in")
    assert [part.split()[:2] for part in found] == [["part", "0"], ["part", "1"], ["part", "2"]]


def test_doctor_and_status_check_the_bots_login(
    tmp_path_factory: pytest.TempPathFactory, cast: Cast, llm: FakeOpenAI
) -> None:
    """`nanomem doctor` asks the homeserver whose the token is; a wrong token fails with the
    fix, never printed whole; `nanomem status` shows the login masked."""
    home = onboarded(tmp_path_factory, "doctor")
    good = cli_env(home, llm, **cast.env())
    bad = cli_env(home, llm, **cast.env(NANOMEM_MATRIX__ACCESS_TOKEN="syt_wrong_token_0000"))
    ok, refused = run_cli_here("doctor", env=good), run_cli_here("doctor", env=bad)
    status = run_cli_here("status", env=good)
    assert f"{cast.bot.user_id} on {cast.server.url}, owner {cast.owner.user.user_id}" in ok.stdout
    assert "refused the access token (***0000)" in refused.stdout
    assert "syt_wrong_token_0000" not in refused.stdout + refused.stderr
    assert f"access token set (***{cast.bot.token[-4:]})" in status.stdout
    assert cast.bot.token not in status.stdout + ok.stdout


def test_an_encrypted_room_gets_one_plain_note(
    tmp_path_factory: pytest.TempPathFactory, cast: Cast, llm: FakeOpenAI
) -> None:
    """With matrix.e2e off, the channel decrypts nothing: in an encrypted room the bot says
    once, plainly, that it cannot read it, and the model is never asked; a plain message there
    is still answered. (With it on, tests/test_matrix_encrypted.py.)"""
    home = onboarded(tmp_path_factory, "encrypted")
    with gateway(home, cast, llm):
        room = cast.owner.room(cast.bot.user_id, direct=True, encrypted=True)
        joined_by_bot(cast.owner, room, cast.bot)
        secret = {"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "AwgA", "session_id": "x"}
        for _ in range(2):
            cast.owner.say(room, "", kind="m.room.encrypted", **secret)
        notes = replies(cast.owner, room, cast.bot, 1)
        cast.owner.say(room, "", kind="m.room.encrypted", **secret)
        cast.owner.say(room, "!help")  # the bot reads on: a plain message is answered
        found = replies(cast.owner, room, cast.bot, 2)
    assert notes == [found[0]] and "encrypted" in found[0] and len(found) == 2
    assert not llm.requests


def test_a_new_home_on_the_same_bot_is_not_taken_for_the_old_one(
    tmp_path_factory: pytest.TempPathFactory, cast: Cast, llm: FakeOpenAI
) -> None:
    """A second home (its inbox numbering from 1 again) answering in the same room from the
    same device: its replies are new events, not the old home's taken again by their
    transaction ids, and what was said before it first ran is not answered again."""
    first, second = onboarded(tmp_path_factory, "home1"), onboarded(tmp_path_factory, "home2")
    with gateway(first, cast, llm):
        room = cast.owner.room(cast.bot.user_id, direct=True)
        joined_by_bot(cast.owner, room, cast.bot)
        cast.owner.say(room, "first")
        replies(cast.owner, room, cast.bot, 1)
    with gateway(second, cast, llm):
        cast.owner.say(room, "second")
        found = replies(cast.owner, room, cast.bot, 2)
    assert found == ["echo: first", "echo: second"]


def test_a_file_the_agent_sends_is_uploaded(
    tmp_path_factory: pytest.TempPathFactory, cast: Cast, llm: FakeOpenAI
) -> None:
    """`send_file` in a room without encryption: the file goes to the media repository and
    its message points at it with `url` (in an encrypted room, `file`: test_matrix_encrypted)."""
    home = onboarded(tmp_path_factory, "sendfile")
    (home.workspace / "report.csv").write_text("a,b\n1,2\n")
    llm.add(Step.tool_call("send_file", {"path": "report.csv", "caption": "the report"}))
    llm.add(Step.reply("sent the report"))
    with gateway(home, cast, llm, NANOMEM_MATRIX__STREAM="false"):
        room = cast.owner.room(cast.bot.user_id, direct=True)
        joined_by_bot(cast.owner, room, cast.bot)
        cast.owner.say(room, "send me the report")
        replies(cast.owner, room, cast.bot, 2)
        (file,) = [c for c in shown(cast.owner.events(room), cast.bot.user_id) if "url" in c]
    server, media = file["url"].removeprefix("mxc://").split("/", 1)
    path = f"/_matrix/client/v1/media/download/{server}/{media}"
    assert cast.server.fetch(path, cast.owner.user.token) == b"a,b\n1,2\n"
    assert file["body"] == "the report" and file["msgtype"] == "m.file"
