"""Slack end to end: the real `nanomem gateway` in a subprocess, slack-bolt's Socket Mode app
against the loopback Slack (tests/fakes/slack_server.py), the model over HTTP."""

from __future__ import annotations

import contextlib
import itertools
import json
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.fakes.slack_server import FakeSlack
from tests.helpers import wait_until
from tests.helpers.gateway import GatewayProcess, load_session, onboarded, user_texts
from tests.helpers.slack import (
    DM,
    GENERAL,
    MEMBER,
    MENTION,
    OWNER,
    STRANGER,
    STRANGER_DM,
    blocks_message,
    replies,
    reply_count,
    slack_fake,
    slack_gateway,
)

pytestmark = pytest.mark.slow
ACK_S = 3.0  # Slack's deadline for an envelope's acknowledgement


def answer(request: dict[str, Any]) -> Step:
    """The model says back what it was told last (its reply names the message it answers)."""
    said = user_texts(request)[-1] if user_texts(request) else ""
    return Step.reply(f"answer to: {said.splitlines()[-1][:80]}")


@pytest.fixture(scope="module")
def running(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Home, FakeSlack, FakeOpenAI, GatewayProcess]]:
    home = onboarded(tmp_path_factory, "slack")
    fake = slack_fake()
    with FakeOpenAI() as llm:
        llm.set_fallback(answer)
        with slack_gateway(home, fake, llm, NANOMEM_TOOLS__SHELL_ENABLED="true") as gateway:
            yield home, fake, llm, gateway
    fake.stop()


def test_a_dm_is_answered_in_mrkdwn_and_acked_at_once(running: Any) -> None:
    home, fake, _, _ = running
    envelope = fake.send_message(DM, OWNER, "hello **there**")
    wait_until(lambda: reply_count(fake, DM, "answer to: hello") == 1, what="the DM's reply")
    assert envelope.ack_s is not None and envelope.ack_s < ACK_S
    assert "answer to: hello *there*" in replies(fake, DM)[-1]  # the Markdown as mrkdwn
    assert load_session(home, f"slack:{DM}").messages  # a session of its own


def test_a_channel_message_is_answered_only_with_a_mention(running: Any) -> None:
    _, fake, llm, _ = running
    asked = len(llm.requests)
    quiet = fake.send_message(GENERAL, OWNER, "talking among ourselves")
    wait_until(lambda: fake.acked(quiet), what="the unaddressed message's ack")
    # Slack sends both a `message` and an `app_mention` for one mention: answered once.
    addressed = fake.send_message(GENERAL, MEMBER, f"{MENTION} what time is it")
    fake.mention(GENERAL, MEMBER, f"{MENTION} what time is it", ts=addressed.payload["event"]["ts"])
    wait_until(lambda: reply_count(fake, GENERAL, "what time is it") >= 1, what="the reply")
    wait_until(lambda: all(e.acked_at for e in fake.envelopes), what="every ack")
    assert reply_count(fake, GENERAL, "what time is it") == 1
    assert not any("among ourselves" in text for text in replies(fake, GENERAL))
    assert len(llm.requests) == asked + 1


def test_a_thread_is_its_own_session_answered_in_the_thread(running: Any) -> None:
    home, fake, _, _ = running
    top = fake.send_message(GENERAL, OWNER, f"{MENTION} start a thread")
    thread = top.payload["event"]["ts"]
    wait_until(lambda: reply_count(fake, GENERAL, "start a thread"), what="the top reply")
    fake.send_message(GENERAL, OWNER, f"{MENTION} inside the thread", thread_ts=thread)
    wait_until(lambda: replies(fake, GENERAL, thread), what="the reply in the thread")
    assert "inside the thread" in replies(fake, GENERAL, thread)[0]
    session = load_session(home, f"slack:{GENERAL}:{thread}")
    said = [str(m.get("content")) for m in session.messages]
    assert any("inside the thread" in s for s in said)
    assert not any("start a thread" in s for s in said)


def test_a_redelivered_envelope_is_answered_once(running: Any) -> None:
    _, fake, llm, _ = running
    envelope = fake.send_message(DM, OWNER, "only once please")
    wait_until(lambda: reply_count(fake, DM, "only once please"), what="the reply")
    asked = len(llm.requests)
    fake.redeliver(envelope)  # Slack's retry: the same event_id, retry_attempt 1
    wait_until(lambda: envelope.attempts == 1 and fake.acked(envelope), what="the retry's ack")
    follow = fake.send_message(DM, OWNER, "and a next one")
    wait_until(lambda: reply_count(fake, DM, "and a next one"), what="the next reply")
    assert reply_count(fake, DM, "only once please") == 1
    assert len(llm.requests) == asked + 1 and follow.ack_s is not None


def test_a_stranger_is_ignored_silently(running: Any) -> None:
    _, fake, llm, gateway = running
    asked = len(llm.requests)
    envelope = fake.send_message(STRANGER_DM, STRANGER, "let me in")
    fake.send_message(STRANGER_DM, STRANGER, "please")
    wait_until(lambda: all(e.acked_at for e in fake.envelopes), what="the acks")
    gateway.wait_for_line(rf"refused Slack member {STRANGER}")
    assert fake.acked(envelope) and replies(fake, STRANGER_DM) == []
    assert len(llm.requests) == asked
    assert sum(f"refused Slack member {STRANGER}" in line for line in gateway.lines) == 1


def test_a_command_and_a_press_are_acked_while_a_long_turn_runs(running: Any) -> None:
    _, fake, llm, _ = running
    llm.add(Step.reply("long answer", hold_after=0))
    fake.send_message(DM, OWNER, "think hard")
    wait_until(lambda: llm.held, what="the long turn to reach the model")
    command = fake.command(DM, OWNER, "help")
    wait_until(lambda: fake.acked(command), timeout=ACK_S, what="the command's ack")
    wait_until(lambda: any("/nanomem" in t or "help" in t.lower() for t in replies(fake, DM)[-1:]),
               what="the help, not behind the turn")  # fmt: skip
    shown = {"ts": replies_ts(fake), "channel": DM, "text": "pick", "thread_ts": None}
    shown["blocks"] = [
        {"type": "actions", "elements": [{"type": "button", "action_id": "nanomem-0",
                                          "text": {"type": "plain_text", "text": "Stop"},
                                          "value": "/stop"}]}
    ]  # fmt: skip
    press = fake.press(shown, "Stop", OWNER)
    wait_until(lambda: fake.acked(press), timeout=ACK_S, what="the press's ack")
    assert command.ack_s is not None and command.ack_s < ACK_S
    assert press.ack_s is not None and press.ack_s < ACK_S
    llm.release()


def test_web_api_calls_share_their_connections(running: Any) -> None:
    """Each Web API call on a connection of its own would mean a TCP and TLS handshake per
    post (slack-sdk's default without a session): ten replies take far fewer."""
    _, fake, _, _ = running
    before = len(fake.api_connections)
    for n in range(10):
        fake.send_message(DM, OWNER, f"one of ten {n}")
    wait_until(lambda: reply_count(fake, DM, "one of ten 9") == 1, what="the tenth reply")
    assert len(fake.api_connections) - before <= 3


def test_a_channel_named_directmessage_is_a_channel_not_a_dm(running: Any) -> None:
    """Anyone may name a channel "directmessage", as Slack names a DM in a command: whether
    the command came from a DM is Slack's fact about the conversation, not its name. Deciding
    on the owner's memory is refused there, as in any channel."""
    _, fake, _, _ = running
    fake.add_conversation("CNAMEDDM1", "channel", name="directmessage")
    fake.command("CNAMEDDM1", OWNER, "dream-approve")
    wait_until(lambda: replies(fake, "CNAMEDDM1"), what="the command's answer")
    assert replies(fake, "CNAMEDDM1") == [
        "Memory changes are decided by the owner, in a private chat."
    ]


def replies_ts(fake: FakeSlack) -> str:
    return str(fake.messages_in(DM)[-1]["ts"])


def test_a_shell_command_is_approved_with_a_button(running: Any) -> None:
    _, fake, llm, _ = running

    def model(request: dict[str, Any]) -> Step:
        last = request["messages"][-1]
        if last["role"] == "tool":
            return Step.reply(f"tool said: {last['content'][:60]}")
        return Step.tool_call("exec", {"command": "echo approved-by-button"})

    llm.set_fallback(model)
    try:
        fake.send_message(DM, OWNER, "run it")
        wait_until(lambda: _has_button(fake, "Allow once"), what="the approval question")
        question = blocks_message(fake, DM, "Allow once")
        # Someone else's press of the owner's choice: refused to them alone, at once.
        told = len(fake.ephemerals)
        theirs = fake.press(question, "Allow once", MEMBER)
        wait_until(lambda: len(fake.ephemerals) > told, timeout=ACK_S, what="the refusal")
        assert fake.ephemerals[-1]["user"] == MEMBER and fake.acked(theirs)
        assert "Only the owner" in fake.ephemerals[-1]["text"]
        press = fake.press(question, "Allow once", OWNER)
        wait_until(lambda: reply_count(fake, DM, "tool said:"), what="the command's result")
        assert "approved-by-button" in replies(fake, DM)[-1]
        assert press.ack_s is not None and press.ack_s < ACK_S
        # The buttons went once pressed: nobody presses them twice.
        cleared = [
            u for u in fake.updates if u.get("ts") == press.payload["container"]["message_ts"]
        ]
        assert cleared and all(b["type"] != "actions" for b in cleared[-1]["blocks"])
        assert "Run this command?" in cleared[-1]["text"]  # the question stays
    finally:
        llm.set_fallback(answer)


def _has_button(fake: FakeSlack, label: str) -> bool:
    try:
        blocks_message(fake, DM, label)
    except AssertionError:
        return False
    return True


def onboarded_home(tmp_path: Any) -> Home:
    from nanomem.cli.onboard import onboard

    home = Home(tmp_path / "home")
    onboard(home)
    return home


def test_a_rate_limited_reply_is_delivered_within_the_run(tmp_path: Any) -> None:
    home, fake = onboarded_home(tmp_path), slack_fake()
    try:
        with FakeOpenAI() as llm:
            llm.set_fallback(answer)
            with slack_gateway(home, fake, llm, NANOMEM_SLACK__STREAM="false"):
                fake.fail("chat.postMessage", "ratelimited", status=429, retry_after=1)
                fake.send_message(DM, OWNER, "despite the limit")
                wait_until(lambda: reply_count(fake, DM, "despite the limit"), timeout=20,
                           what="the reply after Slack's wait")  # fmt: skip
                limited = [c for c in fake.calls if c[0] == "chat.postMessage"]
                assert len(limited) == 2  # refused once, then sent after Retry-After
    finally:
        fake.stop()


def grown(home: Home) -> bool:
    import sqlite3

    with contextlib.closing(sqlite3.connect(home.inbox)) as db:
        row = db.execute("SELECT value FROM positions WHERE name = 'slack.grown'").fetchone()
    return row is not None and row[0] not in ("{}", "")


def test_a_sigkill_mid_reply_loses_nothing_and_doubles_nothing(tmp_path: Any) -> None:
    """Killed while the reply grows in the DM (streamed): after the restart the same message
    is finished, once; nothing else is posted for it."""
    home, fake = onboarded_home(tmp_path), slack_fake()
    try:
        with FakeOpenAI() as llm:
            story = " ".join(f"word{n}" for n in range(80))  # longer than a secret held back
            llm.add(Step.reply(story, pieces=8, hold_after=4))
            gateway = slack_gateway(home, fake, llm)
            fake.send_message(DM, OWNER, "a long story")
            wait_until(lambda: llm.held and replies(fake, DM), what="the reply to start growing")
            # Where it grows is noted in the inbox around its first post (its own test below).
            wait_until(lambda: grown(home), what="the growing message's record")
            gateway.stop(signal.SIGKILL)
            llm.clear()
            llm.set_fallback(lambda r: Step.reply("the whole story, told again"))
            with slack_gateway(home, fake, llm):
                wait_until(lambda: reply_count(fake, DM, "told again"), what="the replayed reply")
                wait_until(lambda: not any(e.acked_at is None for e in fake.envelopes), what="acks")
            assert replies(fake, DM) == ["the whole story, told again"]
    finally:
        fake.stop()


def test_files_go_both_ways(running: Any) -> None:
    """A file shared in the DM reaches the turn (saved in the workspace); `send_file` uploads
    one into the conversation it answers."""
    home, fake, llm, _ = running
    (home.workspace / "report.csv").write_text("a,b\n1,2\n")
    llm.add(Step.tool_call("send_file", {"path": "report.csv", "caption": "the report"}))
    llm.add(Step.reply("sent the report"))
    shared = fake.add_file("notes.txt", b"remember the milk")
    fake.send_message(DM, OWNER, "here are my notes", files=[shared], subtype="file_share")
    wait_until(lambda: reply_count(fake, DM, "sent the report"), what="the reply")
    said = user_texts(llm.requests[-2])[-1]
    assert "[file: notes.txt]" in said and "here are my notes" in said
    saved = list((home.workspace / "media").glob("slack-*.txt"))
    assert [p.read_bytes() for p in saved] == [b"remember the milk"]
    (upload,) = [u for u in fake.uploads if u["name"] == "report.csv"]
    assert upload["data"] == b"a,b\n1,2\n" and upload["channel"] == DM
    assert upload["comment"] == "the report"


def test_socket_mode_reconnects_when_slack_says_disconnect(running: Any) -> None:
    _, fake, _, _ = running
    opened = fake.connections_opened
    fake.disconnect()  # Slack refreshes its connections every few hours
    wait_until(lambda: fake.connections_opened > opened and fake.connected(), what="reconnect")
    fake.send_message(DM, OWNER, "after the refresh")
    wait_until(lambda: reply_count(fake, DM, "after the refresh"), what="the reply")


def test_a_channel_turn_never_sees_the_owners_personal_memory(running: Any) -> None:
    home, fake, llm, _ = running
    (home.workspace / "USER.md").write_text("The owner's secret hobby: PERSONAL-MARKER-42\n")
    fake.send_message(DM, OWNER, "in private")
    wait_until(lambda: reply_count(fake, DM, "in private"), what="the DM's reply")
    assert "PERSONAL-MARKER-42" in str(llm.requests[-1]["messages"][0])  # the DM sees it
    fake.send_message(GENERAL, OWNER, f"{MENTION} in the channel")
    wait_until(lambda: reply_count(fake, GENERAL, "in the channel"), what="the channel's reply")
    assert "PERSONAL-MARKER-42" not in str(llm.requests[-1])


def test_a_dm_reply_grows_by_edits_at_a_bounded_rate(running: Any) -> None:
    _, fake, llm, _ = running
    story = " ".join(f"piece{n}" for n in range(120))
    llm.add(Step.reply(story, pieces=30, pause=0.1))  # about 3 s of pieces
    fake.send_message(DM, OWNER, "tell it slowly")
    wait_until(lambda: reply_count(fake, DM, "piece119"), what="the whole reply")
    (grown,) = [m for m in fake.messages_in(DM) if "piece119" in m["text"]]
    edits = [u["at"] for u in fake.updates if u.get("ts") == grown["ts"]]
    assert len(edits) >= 3  # it grew, edit by edit, then became the whole reply
    gaps = [b - a for a, b in itertools.pairwise(edits)][:-1]  # the last: the whole
    assert all(gap >= 1.0 for gap in gaps), gaps


def test_health_says_when_socket_mode_stays_down_and_recovers(tmp_path: Any) -> None:
    home, fake = onboarded_home(tmp_path), slack_fake()
    try:
        down_after = {"NANOMEM_SLACK__DOWN_AFTER_S": "1"}  # 15 s by default
        with FakeOpenAI() as llm, slack_gateway(home, fake, llm, **down_after) as gateway:
            assert gateway.health()[0] == 200
            fake.fail("apps.connections.open", "internal_error", times=10_000)
            fake.drop()
            wait_until(lambda: gateway.health()[0] != 200, timeout=40, what="/health to say")
            _, body = gateway.health()
            assert "no Socket Mode connection" in json.dumps(body)
            fake.clear_faults()
            wait_until(lambda: gateway.health()[0] == 200, timeout=40, what="/health again")
            fake.send_message(DM, OWNER, "back again")
            wait_until(lambda: reply_count(fake, DM, "back again"), what="the reply")
            said = "".join(gateway.lines)
            assert said.count("no Socket Mode connection") == 1 and "Traceback" not in said
            assert "slack: Socket Mode connected again" in said
    finally:
        fake.stop()


def test_a_sigkill_while_slack_takes_the_first_post_doubles_nothing(tmp_path: Any) -> None:
    """Killed after Slack made the reply's first message but before its answer came back:
    after the restart that message is found (our first post since) and finished."""
    home, fake = onboarded_home(tmp_path), slack_fake()
    try:
        with FakeOpenAI() as llm:
            story = " ".join(f"word{n}" for n in range(80))
            llm.add(Step.reply(story, pieces=8, hold_after=4))
            gateway = slack_gateway(home, fake, llm)
            fake.slow("chat.postMessage", 60)
            fake.send_message(DM, OWNER, "a long story")
            wait_until(lambda: replies(fake, DM), what="Slack to take the first post")
            gateway.stop(signal.SIGKILL)
            llm.clear()
            fake.clear_faults()
            llm.set_fallback(lambda r: Step.reply("the whole story, told again"))
            with slack_gateway(home, fake, llm):
                wait_until(lambda: reply_count(fake, DM, "told again"), what="the replayed reply")
            assert replies(fake, DM) == ["the whole story, told again"]
    finally:
        fake.stop()


def test_a_copy_slack_sends_after_a_restart_is_known(tmp_path: Any) -> None:
    """The keys of what was stored are stored with it: Slack's retry of an envelope whose ack
    it missed, arriving after a restart, is still answered once."""
    home, fake = onboarded_home(tmp_path), slack_fake()
    try:
        with FakeOpenAI() as llm:
            llm.set_fallback(answer)
            with slack_gateway(home, fake, llm):
                envelope = fake.send_message(DM, OWNER, "before the restart")
                wait_until(lambda: reply_count(fake, DM, "before the restart"), what="the reply")
            asked = len(llm.requests)
            with slack_gateway(home, fake, llm):
                fake.redeliver(envelope)
                wait_until(lambda: envelope.attempts == 1 and fake.acked(envelope), what="ack")
                fake.send_message(DM, OWNER, "after it")
                wait_until(lambda: reply_count(fake, DM, "after it"), what="the next reply")
            assert reply_count(fake, DM, "before the restart") == 1
            assert len(llm.requests) == asked + 1
    finally:
        fake.stop()


def test_a_sigkill_before_a_whole_reply_is_marked_delivered_doubles_nothing(
    tmp_path: Any,
) -> None:
    """A whole reply in two messages (not streamed): killed once Slack made its first message
    but before the answer came back (so before the inbox marks it delivered). After the
    restart the stored reply goes out again: its first message is found by its metadata and
    not posted twice, its second is posted once."""
    home, fake = onboarded_home(tmp_path), slack_fake()
    first = "\n".join(f"first half line {n}" for n in range(150))
    second = "\n".join(f"second half line {n}" for n in range(150))
    try:
        with FakeOpenAI() as llm:
            llm.set_fallback(lambda r: Step.reply(f"{first}\n\n{second}"))
            gateway = slack_gateway(home, fake, llm, NANOMEM_SLACK__STREAM="false")
            fake.slow("chat.postMessage", 60)
            fake.send_message(DM, OWNER, "a reply in two messages")
            wait_until(lambda: replies(fake, DM), what="Slack to take the first message")
            gateway.stop(signal.SIGKILL)
            fake.clear_faults()
            asked = len(llm.requests)
            with slack_gateway(home, fake, llm, NANOMEM_SLACK__STREAM="false"):
                wait_until(lambda: reply_count(fake, DM, "second half line 149"),
                           what="the rest of the stored reply")  # fmt: skip
            shown = replies(fake, DM)
            assert len(shown) == 2, shown
            assert "first half line 0" in shown[0] and "second half line 149" in shown[1]
            assert len(llm.requests) == asked  # the stored reply, not a new turn
            stored = [c[1].get("metadata") for c in fake.calls if c[0] == "chat.postMessage"]
            assert all(m and m["event_payload"]["part"] in (0, 1) for m in stored), stored
    finally:
        fake.stop()
