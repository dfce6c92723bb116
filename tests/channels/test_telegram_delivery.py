"""Per-chat delivery, chat state and the poll watch, against a scripted Bot API port."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from channels.telegram.delivery import (
    EMPTY,
    SEND_ATTEMPTS,
    TOKEN_REJECTED,
    Delivery,
    PollWatch,
    SendError,
    chunks_of,
    command_menu,
    in_telegram_spelling,
    is_allowed,
    strip_mention,
    target,
)
from nanomem.agent.bus import InboundMessage
from nanomem.agent.channel import ChannelDown, ChatQueues, DeliveryLater, send_in_turn
from nanomem.agent.commands import STOPPED, Command
from nanomem.agent.outbound import (
    Button,
    File,
    OutboundMessage,
    Part,
    Progress,
    Text,
    TurnEnded,
    TurnStarted,
)
from tests.conftest import log_lines
from tests.helpers import until


@dataclass
class FakePort:
    """Records calls; `faults[key]` are raised, in order, by that chat's next sends."""

    sent: list[tuple[str, str, bool, int | None, float]] = field(default_factory=list)
    edits: list[tuple[str, int, str]] = field(default_factory=list)
    typed: list[str] = field(default_factory=list)
    buttons: list[tuple[Button, ...]] = field(default_factory=list)  # per sent message
    files: list[tuple[str, str, str, bytes]] = field(default_factory=list)  # key, kind, name
    faults: dict[str, deque[SendError]] = field(default_factory=dict)
    later: dict[str, tuple[int, SendError]] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def fail(self, key: str, *errors: SendError) -> None:
        self.faults.setdefault(key, deque()).extend(errors)

    def fail_after_sent(self, key: str, sent: int, error: SendError) -> None:
        """`error` for the chat's first send once `sent` messages went to it."""
        self.later[key] = (sent, error)

    async def send_text(
        self,
        key: str,
        text: str,
        *,
        html: bool,
        reply_to: int | None = None,
        quiet: bool = False,
        buttons: tuple[Button, ...] = (),
    ) -> int:
        if (after := self.later.get(key)) and len(self.texts(key)) == after[0]:
            self.fail(key, self.later.pop(key)[1])
        if self.faults.get(key):
            raise self.faults[key].popleft()
        self.sent.append((key, text, html, reply_to, time.monotonic() - self.started))
        self.buttons.append(buttons)
        return len(self.sent)

    async def send_file(
        self, key: str, kind: str, name: str, data: bytes, *, caption: str, html: bool
    ) -> int:
        if self.faults.get(key):
            raise self.faults[key].popleft()
        self.files.append((key, kind, name, data))
        return len(self.sent) + len(self.files)

    async def edit_text(self, key: str, message_id: int, text: str, *, html: bool = False) -> None:
        self.edits.append((key, message_id, text))

    async def delete(self, key: str, message_id: int) -> None:
        raise SendError("Bad Request: message to delete not found")

    async def send_draft(self, key: str, draft_id: int, text: str, *, html: bool) -> None:
        raise SendError("Not Found: method not found", unsupported=True)

    async def typing(self, key: str) -> None:
        self.typed.append(key)

    def texts(self, key: str) -> list[str]:
        return [text for k, text, *_ in self.sent if k == key]


def reply(key: str, text: str, reply_to: str | None = None, kind: str = "reply") -> OutboundMessage:
    part: Part = (
        Progress(text, "tool")
        if kind == "progress"
        else Text(text, "error" if kind == "error" else "reply")
    )
    return OutboundMessage("telegram", key, part, reply_to)


class InOrder:
    """Delivery behind the core's per-chat order (ChatQueues, as pump_outbound keeps it, and
    its in-run retry after a flood wait): a send is queued for its chat and returns a future
    that settles once it is delivered."""

    def __init__(self, delivery: InOrder) -> None:
        self.delivery = delivery
        self.queues = ChatQueues("test-out")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.__dict__["delivery"], name)

    def send(self, msg: OutboundMessage) -> asyncio.Future[None]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def deliver() -> None:
            try:
                await send_in_turn(self.delivery.send, [msg])
            except DeliveryLater as exc:
                done.set_exception(exc)
                return
            done.set_result(None)

        self.queues.submit(msg.chat_id, deliver)
        return done

    def started(self, key: str, inbound_id: str, message_id: int, command: str = "") -> None:
        """A message went to the core (the channel's part) and its turn began (the core's)."""
        self.delivery.accepted(key, inbound_id, message_id, group=key.startswith("-"))
        self.send(OutboundMessage("telegram", key, TurnStarted(command), inbound_id))

    def ended(self, key: str, inbound_id: str, *, stopped: bool = False) -> None:
        self.send(OutboundMessage("telegram", key, TurnEnded(stopped), inbound_id))

    async def close(self, within_s: float) -> None:
        """As the gateway stops: the core delivers what is queued, then the channel stops."""
        await self.queues.drain(within_s)
        await self.delivery.close()


async def settle(delivery: InOrder, within_s: float = 5.0) -> None:
    assert await delivery.queues.drain(within_s), "deliveries still pending"


@pytest.fixture
def port() -> FakePort:
    return FakePort()


@pytest.fixture
def delivery(port: FakePort) -> InOrder:
    return InOrder(
        Delivery(port, typing_every_s=0.05, status_every_s=0.2, backoff_s=0.01, typing_delay_s=0)
    )


@pytest.mark.parametrize(
    ("allow_from", "user", "chat", "allowed"),
    [
        ([], 42, 42, False),  # empty means nobody
        ([42], 42, 42, True),
        ([42], 7, 7, False),
        (["*"], 7, 7, True),
        ([-100123], 7, -100123, True),  # a whole group, by its id
        ([42], 7, -100123, False),
    ],
)
def test_access_is_by_numeric_id_and_denied_by_default(
    allow_from: list[int | str], user: int, chat: int, allowed: bool
) -> None:
    assert is_allowed(allow_from, user, chat) is allowed


@pytest.mark.parametrize(
    ("allow_from", "user", "chat", "allowed"),
    [
        ([], 4242, 4242, True),  # the owner, whom no allow_from names
        ([], 4242, -100123, True),  # in a group too, as an allowed user is
        ([], 7, 7, False),  # nobody else
        ([42], 7, 4242, False),  # a chat id that claims the owner's admits nobody else
    ],
)
def test_the_owner_is_always_let_in(
    allow_from: list[int | str], user: int, chat: int, allowed: bool
) -> None:
    assert is_allowed(allow_from, user, chat, owner=4242) is allowed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("@nanomem_bot what is 2+2?", "what is 2+2?"),
        ("hey @Nanomem_Bot, help", "hey , help"),
        ("@nanomem_bot", "@nanomem_bot"),  # nothing but the mention: keep it
        ("mail me at a@nanomem_bot.org", "mail me at a@nanomem_bot.org"),
        ("@nanomem_bot_two hi", "@nanomem_bot_two hi"),  # another bot
        ("/help@nanomem_bot", "/help@nanomem_bot"),  # the core parses command addressees
        ("line one\n@nanomem_bot line two", "line one\nline two"),
        ("@nanomem_bot run:\n    x  =  1", "run:\n    x  =  1"),  # code keeps its spaces
    ],
)
def test_strip_mention(text: str, expected: str) -> None:
    assert strip_mention(text, "nanomem_bot") == expected


def test_target_parses_chats_and_forum_topics() -> None:
    assert target("42") == (42, None)
    assert target("-100123:7") == (-100123, 7)


def test_command_menu_uses_underscores_and_skips_invalid_names() -> None:
    async def handler(msg: InboundMessage, args: str) -> str:
        return ""

    commands = [
        Command("help", "show the commands", handler),
        Command("dream-log", "show a memory change", handler),
        Command("Bad Name", "invalid", handler),
        Command("x" * 40, "too long", handler),
    ]
    assert command_menu(commands) == [
        ("start", "say hello"),
        ("help", "show the commands"),
        ("dream_log", "show a memory change"),
    ]


def test_command_names_in_our_own_text_take_telegrams_spelling() -> None:
    async def handler(msg: InboundMessage, args: str) -> str:
        return ""

    commands = [Command(n, "", handler) for n in ("dream", "dream-log", "dream-restore", "help")]
    text = "/help — list\n/dream — learn\n/dream-log [id] — show\n/dream-restore <id> undoes one."
    assert in_telegram_spelling(text, commands) == (
        "/help — list\n/dream — learn\n/dream_log [id] — show\n/dream_restore <id> undoes one."
    )
    assert in_telegram_spelling("see /etc/dream-log and a/dream-log", commands) == (
        "see /etc/dream-log and a/dream-log"  # paths are not commands
    )


def test_chunks_of_replies_errors_and_empty_text() -> None:
    assert chunks_of(reply("1", "**hi**")) == [("<b>hi</b>", True)]
    assert chunks_of(reply("1", "a < b **not bold**", kind="error")) == [
        ("a < b **not bold**", False)
    ]
    assert chunks_of(reply("1", "")) == [(EMPTY, False)]
    long_error = chunks_of(reply("1", "x" * 5000, kind="error"))
    assert [len(text) for text, _ in long_error] == [4096, 904]


async def test_replies_are_rendered_and_quoted_only_in_groups(
    delivery: InOrder, port: FakePort
) -> None:
    delivery.started("42", "in-1", 11)
    delivery.started("-100:5", "in-2", 12)
    delivery.send(reply("42", "**private**", "in-1"))
    delivery.send(reply("-100:5", "*group*", "in-2"))
    await settle(delivery)
    assert [(k, t, h, r) for k, t, h, r, _ in port.sent] == [
        ("42", "<b>private</b>", True, None),
        ("-100:5", "<i>group</i>", True, 12),
    ]


async def test_long_replies_go_out_in_order_and_only_the_first_part_quotes(
    delivery: InOrder, port: FakePort
) -> None:
    delivery.started("-100", "in", 9)
    text = "\n\n".join(f"part {n:02d} " + "word " * 150 for n in range(20))
    delivery.send(reply("-100", text, "in"))
    await settle(delivery)
    assert len(port.sent) >= 3 and all(len(t) <= 4096 for _, t, *_ in port.sent)
    assert [r for *_, r, _ in port.sent] == [9] + [None] * (len(port.sent) - 1)
    assert "".join(port.texts("-100")).count("part ") == 20


async def test_rejected_html_is_resent_as_plain_text(delivery: InOrder, port: FakePort) -> None:
    port.fail("42", SendError("Can't parse entities", bad_html=True))
    delivery.send(reply("42", "**bold** & `code`"))
    await settle(delivery)
    assert [(t, h) for _, t, h, *_ in port.sent] == [("bold & code", False)]


async def test_network_errors_are_retried_then_given_up_and_logged(
    delivery: InOrder, port: FakePort
) -> None:
    port.fail("42", SendError("Bad Gateway", transient=True), SendError("reset", transient=True))
    delivery.send(reply("42", "after two failures"))
    await settle(delivery)
    assert port.texts("42") == ["after two failures"]
    port.fail("7", *[SendError("down", transient=True)] * 6)
    port.fail("8", SendError("Forbidden: bot was blocked"))
    with log_lines("ERROR") as logged:
        delivery.send(reply("7", "never arrives"))
        delivery.send(reply("8", "blocked"))
        await settle(delivery)
    assert port.texts("7") == port.texts("8") == []
    assert sorted(logged) == [
        "telegram: gave up sending reply part 1/1 to chat 7: down",
        "telegram: gave up sending reply part 1/1 to chat 8: Forbidden: bot was blocked",
    ]


async def test_a_flood_wait_in_one_chat_never_delays_another(
    delivery: InOrder, port: FakePort
) -> None:
    port.fail("1", SendError("Too Many Requests", retry_after=0.5))
    delivery.send(reply("1", "first"))
    delivery.send(reply("1", "second"))
    delivery.send(reply("2", "other chat"))
    await settle(delivery)
    order = [(k, t) for k, t, *_ in port.sent]
    assert order == [("2", "other chat"), ("1", "first"), ("1", "second")]
    at = {t: when for _, t, _, _, when in port.sent}
    assert at["first"] >= 0.5  # the flood wait was waited out (the order shows who waited)


async def test_typing_runs_while_a_turn_waits_and_stops_with_the_answer(
    delivery: InOrder, port: FakePort
) -> None:
    delivery.started("42", "turn", 1)
    delivery.started("42", "help", 2, "help")
    await until(lambda: port.typed.count("42") >= 3)  # typing repeats while the turn waits
    delivery.send(reply("42", "help text", "help"))  # answered at once: the turn still runs
    delivery.ended("42", "help")
    await asyncio.sleep(0.1)  # two typing periods: it must still be shown
    assert delivery.turns.chat("42").typing is not None
    delivery.send(reply("42", "the answer", "turn"))
    await settle(delivery)
    assert delivery.turns.chat("42").typing is None
    typed = len(port.typed)
    await asyncio.sleep(0.15)  # three typing periods: none may come
    assert len(port.typed) == typed


async def test_typing_stops_on_failure_and_on_stop(delivery: InOrder, port: FakePort) -> None:
    tried: list[str] = []

    async def broken(key: str) -> None:
        tried.append(key)
        raise SendError("network down", transient=True)

    port.typing = broken  # type: ignore[method-assign]
    delivery.started("1", "turn", 1)
    await until(lambda: tried)  # typing starts ...
    await until(lambda: delivery.turns.chat("1").typing is None)  # ... and stops on the failure
    await asyncio.sleep(0.15)  # three typing periods: no other attempt
    assert tried == ["1"] and delivery.turns.chat("1").pending == ["turn"]

    port2 = FakePort()
    other = InOrder(Delivery(port2, typing_every_s=0.05, status_every_s=0.2, typing_delay_s=0))
    other.started("2", "turn", 1)
    other.started("2", "stop", 2, "stop")
    await until(lambda: port2.typed)
    other.ended("2", "turn", stopped=True)  # as the core tells it: the cut turn, then /stop's
    other.send(reply("2", STOPPED, "stop"))
    other.ended("2", "stop")
    await settle(other)
    assert "2" not in other.turns.chats and port2.texts("2") == [STOPPED]


async def test_progress_is_one_throttled_quiet_message(delivery: InOrder, port: FakePort) -> None:
    delivery.started("42", "turn", 1)
    for n in range(5):
        delivery.send(reply("42", f"read_file(path='{n}.md')", "turn", kind="progress"))
    await settle(delivery)
    await asyncio.sleep(0.25)  # past status_every_s: the next line may edit the message
    delivery.send(reply("42", "write_file(path='x')", "turn", kind="progress"))
    await settle(delivery)
    assert port.texts("42") == ["⚙️ read_file(path='4.md') · 5 steps"]  # the latest line
    assert port.edits == [("42", 1, "⚙️ write_file(path='x') · 6 steps")]
    delivery.send(reply("42", "done", "turn"))
    delivery.send(reply("42", "late_tool()", "turn", kind="progress"))  # after the end
    await settle(delivery)
    assert port.texts("42")[-1] == "done" and len(port.edits) == 1


async def test_close_delivers_what_is_queued_and_asks_nobody_to_resend(
    delivery: InOrder, port: FakePort
) -> None:
    delivery.started("1", "turn", 1)
    delivery.started("2", "turn2", 2)
    sent = delivery.send(reply("2", "answered", "turn2"))
    await delivery.close(within_s=5)
    assert port.texts("1") == [] and port.texts("2") == ["answered"]
    assert sent.done() and sent.exception() is None
    assert delivery.turns.chat("1").typing is None


async def test_a_reply_that_cannot_be_sent_now_is_kept_for_later(
    delivery: InOrder, port: FakePort
) -> None:
    port.fail("1", *[SendError("network down", transient=True)] * SEND_ATTEMPTS)
    sent = delivery.send(reply("1", "the answer", "turn"))
    with pytest.raises(DeliveryLater):
        await asyncio.wait_for(sent, 30)
    port.fail("1", SendError("Forbidden: bot was blocked by the user"))
    refused = delivery.send(reply("1", "the answer", "turn"))
    await asyncio.wait_for(refused, 30)  # refused for good: settled, nothing to keep
    port.fail("1", SendError("network down", transient=True))
    await asyncio.wait_for(delivery.send(reply("1", "the answer", "turn")), 30)
    assert port.texts("1") == ["the answer"]  # a passing fault is retried, then sent


async def test_a_file_that_cannot_be_sent_now_is_told_as_it_is_in_no_inbox(
    port: FakePort, tmp_path: Path
) -> None:
    """A file from send_file (or a spoken reply) has no seq: nothing would send it at the next
    start, so the chat hears that it could not go instead of a silent DeliveryLater."""
    (tmp_path / "report.csv").write_text("plant,water at\n")
    delivery = InOrder(
        Delivery(port, typing_every_s=1, status_every_s=1, backoff_s=0.01, workspace=tmp_path)
    )
    down = [SendError("network down", transient=True)] * SEND_ATTEMPTS
    port.fail("1", *down)
    file = OutboundMessage("telegram", "1", File("report.csv"), "turn")
    await asyncio.wait_for(delivery.send(file), 30)  # settled: nothing raised to keep it
    assert port.files == []
    assert port.texts("1") == ["The file report.csv could not be sent now: network down"]
    port.fail("1", *down)
    kept = delivery.send(replace(file, seq=3))  # an answer in the inbox is sent again later
    with pytest.raises(DeliveryLater):
        await asyncio.wait_for(kept, 30)
    await asyncio.wait_for(delivery.send(file), 30)
    assert port.files == [("1", "document", "report.csv", b"plant,water at\n")]


def test_poll_watch_tells_a_refused_token_and_a_stall() -> None:
    watch = PollWatch(stall_after_s=0.05)
    assert watch.diagnose() is None and not watch.dead()
    watch.finished(200)
    watch.finished(401)
    assert watch.dead() and watch.diagnose() == TOKEN_REJECTED
    watch.reset()
    watch.error = "Conflict: terminated by other getUpdates request"
    watch.finished(409)
    assert watch.diagnose() == f"telegram: polling fails: {watch.error}" and not watch.dead()
    watch.finished(200)
    assert watch.error == "" and watch.diagnose() is None
    time.sleep(0.06)  # past stall_after_s with no answer: the stall is the behaviour tested
    assert watch.dead() and "no answer to polling" in (watch.diagnose() or "")


async def test_poll_watch_restarts_with_backoff_until_it_works() -> None:
    watch = PollWatch(stall_after_s=60, backoff_s=0.1)
    outcomes = [ChannelDown(TOKEN_REJECTED), RuntimeError("boom"), None]
    calls: list[float] = []

    async def restart() -> None:
        calls.append(time.monotonic())
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome
        watch.reset()

    watch.finished(401)
    task = asyncio.create_task(watch.run(restart, every_s=0.01))
    await until(lambda: not outcomes and watch.problem is None)
    task.cancel()
    assert len(calls) == 3 and watch.problem is None
    assert calls[1] - calls[0] >= 0.1 and calls[2] - calls[1] >= 0.2  # failures back off


async def test_idle_chats_are_forgotten_once_answered(delivery: InOrder, port: FakePort) -> None:
    for n in range(50):
        delivery.started(str(n), f"in{n}", n)
        delivery.send(reply(str(n), "done", reply_to=f"in{n}"))
    delivery.started("busy", "a", 1)
    delivery.started("busy", "b", 2)
    delivery.send(reply("busy", "first answered", reply_to="a"))
    await settle(delivery)
    assert list(delivery.turns.chats) == list(delivery.chats) == ["busy"]  # "b" still waits
    assert len(port.sent) == 51


async def test_a_reply_a_flood_wait_cut_goes_on_after_its_delivered_parts(
    delivery: InOrder, port: FakePort
) -> None:
    """A flood wait on a long reply's second part: the core sends it again within the run
    (DeliveryLater.retry_in_s), from that part on; the first part is never sent twice."""
    delivery.started("-100", "in", 9)
    text = "\n\n".join(f"part {n:02d} " + "word " * 150 for n in range(20))
    port.fail_after_sent("-100", 1, SendError("Too Many Requests", retry_after=0.3))
    sent = delivery.send(reply("-100", text, "in"))
    await asyncio.wait_for(sent, 10)
    texts = port.texts("-100")
    assert not port.faults["-100"] and len(texts) >= 3  # the flood wait came, and passed
    assert "".join(texts).count("part ") == 20 and len(set(texts)) == len(texts)  # none twice
    assert [r for *_, r, _ in port.sent] == [9] + [None] * (len(port.sent) - 1)  # quoted once
    assert port.sent[1][4] - port.sent[0][4] >= 0.3  # the wait was kept


async def test_a_part_refused_as_too_long_is_sent_in_smaller_pieces(
    delivery: InOrder, port: FakePort
) -> None:
    port.fail("1", SendError("Bad Request: message is too long"))
    port.fail("1", SendError("Bad Request: message is too long"))
    text = "\n\n".join(f"paragraph {n} " + "words " * 60 for n in range(10))
    delivery.send(reply("1", text))
    await settle(delivery)
    sent = port.texts("1")
    assert len(sent) >= 3  # halved, then the first half halved again
    assert len(sent[0]) <= len(text) // 4 + 1
    assert " ".join(sent).split() == text.split()


async def test_a_short_part_refused_as_too_long_is_given_up_not_split_forever(
    delivery: InOrder, port: FakePort
) -> None:
    port.fail("1", SendError("Bad Request: message is too long"))
    delivery.send(reply("1", "short"))
    delivery.send(reply("1", "next"))
    await settle(delivery)
    assert port.texts("1") == ["next"]


async def test_a_quick_answer_needs_no_typing_action(port: FakePort) -> None:
    delivery = InOrder(Delivery(port, typing_every_s=0.05, status_every_s=0.2, typing_delay_s=0.3))
    delivery.started("1", "quick", 1)
    delivery.started("2", "slow", 2)
    delivery.send(reply("1", "at once", "quick"))  # long before the typing delay is over
    await until(lambda: "2" in port.typed)  # the slow one shows it (control)
    assert "1" not in port.typed
    delivery.send(reply("2", "at last", "slow"))
    await settle(delivery)


async def test_buttons_go_under_the_last_part_of_a_reply(delivery: InOrder, port: FakePort) -> None:
    choices = (Button("Approve", "/dream-approve 3f2a"), Button("Reject", "/dream-reject 3f2a"))
    long = "\n\n".join(f"Paragraph {n}: " + "words " * 150 for n in range(12))
    msg = OutboundMessage("telegram", "42", Text(long, buttons=choices))
    await delivery.send(msg)
    assert len(port.sent) > 1
    assert port.buttons == [()] * (len(port.sent) - 1) + [choices]
