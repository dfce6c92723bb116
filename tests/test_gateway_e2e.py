"""`nanomem gateway` in a subprocess: python-telegram-bot against the loopback Bot API, litellm
against the loopback model server. One gateway serves most tests (it takes seconds to start)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI, Step, echo_step
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import wait_until
from tests.helpers.gateway import GatewayProcess, load_session, onboarded, texts, user_texts
from tests.helpers.loopback import loopback

TOKEN_REJECTED = "telegram: the bot token was rejected (check telegram.token)"
LAST_DREAM = {"last_run": "2026-11-21T08:00:00+00:00", "status": "changed", "entries": 12}
GROWING = "**Bold** words, then `code`, " + "and a sentence that keeps on growing " * 8
NEVER_S = 3600.0  # no test waits it out: a stop within WAIT_S (far below) proves a cut
LONG = "\n\n".join(f"Paragraph {n:03d}: " + "lorem ipsum dolor sit amet " * 4 for n in range(80))


def scripted(request: dict[str, Any]) -> Step:
    """The model's answer, chosen by a keyword in the last user message (tests run at once)."""
    last = str(request["messages"][-1].get("content", ""))
    if "LONG" in last:
        return Step.reply(LONG)
    if "SLOW" in last:  # never within a test: only a /stop or a stop can end it
        return Step.reply("the slow answer", latency=NEVER_S)
    if "LATE" in last:  # held until the test calls llm.release()
        return Step.reply("the late answer", hold_after=0)
    if "GROW" in last:
        return Step.reply(GROWING, pieces=12, pause=0.05)
    if "HTML" in last:
        return Step.reply("**bold** and `code` & more")
    return echo_step(request)


def asked(llm: FakeOpenAI, word: str) -> list[dict[str, Any]]:
    """Model requests whose last user message contains `word`."""
    return [r for r in llm.requests if word in user_texts(r)[-1]]


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[FakeTelegram, FakeOpenAI]]:
    with loopback(scripted) as both:
        yield both


@pytest.fixture(scope="module")
def gateway(
    servers: tuple[FakeTelegram, FakeOpenAI], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    home = onboarded(tmp_path_factory, "gateway")
    home.dream_state.write_text(json.dumps(LAST_DREAM))
    with GatewayProcess(home, *servers, NANOMEM_GATEWAY__GRACE_S="5") as process:
        servers[0].send_text(1000, "warm up")  # the first turn imports the model library
        servers[0].wait_for_messages(1000, 1, timeout=30)
        yield process


@pytest.fixture
def telegram(servers: tuple[FakeTelegram, FakeOpenAI]) -> FakeTelegram:
    return servers[0]


@pytest.fixture
def llm(servers: tuple[FakeTelegram, FakeOpenAI]) -> FakeOpenAI:
    return servers[1]


def test_an_allowed_user_gets_the_reply(
    gateway: GatewayProcess, telegram: FakeTelegram, llm: FakeOpenAI
) -> None:
    telegram.send_text(1001, "hello there")
    (reply,) = telegram.wait_for_messages(1001, 1)
    assert reply["text"].startswith("echo: ") and reply["text"].endswith("hello there")
    assert "channel telegram" in asked(llm, "hello there")[0]["messages"][-1]["content"]
    assert {c["command"] for c in telegram.commands or []} >= {"start", "help", "new", "stop"}


def test_a_slow_reply_shows_typing(gateway: GatewayProcess, telegram: FakeTelegram) -> None:
    telegram.send_text(1016, "SLOW, so type")
    wait_until(
        lambda: {"chat_id": 1016, "action": "typing"} in telegram.chat_actions(1016),
        what="a typing action (after a second without an answer)",
    )
    telegram.send_text(1016, "/stop")
    assert texts(telegram.wait_for_messages(1016, 1)) == ["Stopped."]


def test_a_stranger_gets_nothing_and_never_reaches_the_model(
    gateway: GatewayProcess, telegram: FakeTelegram, llm: FakeOpenAI
) -> None:
    for text in ("secret words", "/start", "/help"):
        telegram.send_text(666, text, username="mallory")
    telegram.send_text(1002, "after the stranger")
    telegram.wait_for_messages(1002, 1)  # later than the stranger's messages in the same poll
    time.sleep(0.3)  # a margin for what must not come: nothing shows that nothing will
    assert telegram.sent_messages(666) == [] and telegram.chat_actions(666) == []
    assert not any("secret words" in json.dumps(r) for r in llm.requests)
    gateway.wait_for_line(r"refused Telegram user 666 \(@mallory\); add it to telegram\.allow_from")
    assert sum("refused Telegram user 666" in line for line in gateway.lines) == 1
    sessions = [p.name for p in gateway.home.sessions.iterdir()]
    assert not any("666" in name for name in sessions)


def test_a_long_reply_arrives_as_ordered_chunks(
    gateway: GatewayProcess, telegram: FakeTelegram
) -> None:
    telegram.send_text(1003, "LONG please")
    wait_until(
        lambda: "Paragraph 079" in "".join(texts(telegram.sent_messages(1003))),
        what="the last paragraph",
    )
    chunks = texts(telegram.sent_messages(1003))
    assert len(chunks) >= 3 and all(len(chunk) <= 4096 for chunk in chunks)
    numbers = [int(n) for n in re.findall(r"Paragraph (\d{3})", "".join(chunks))]
    assert numbers == list(range(80))


def test_a_reply_shows_as_a_draft_then_arrives_formatted(
    gateway: GatewayProcess, telegram: FakeTelegram
) -> None:
    telegram.send_text(1015, "GROW as you write")
    (reply,) = telegram.wait_for_messages(1015, 1)
    assert reply["html"].startswith("<b>Bold</b> words, then <code>code</code>, and a sentence")
    drafts = telegram.drafts(1015)  # the model streams in 12 pieces, 50 ms apart
    assert len(drafts) >= 1 and all(d["draft_id"] == drafts[0]["draft_id"] for d in drafts)
    assert all(d["html"] for d in drafts) and len(drafts[0]["text"]) < len(reply["text"])
    calls = [method for method, params in telegram.calls if params.get("chat_id") == 1015]
    assert calls.index("sendmessagedraft") < calls.index("sendmessage")


def test_html_that_telegram_rejects_is_resent_as_plain_text(
    gateway: GatewayProcess, telegram: FakeTelegram
) -> None:
    telegram.reject_html_next(chat_id=1004)
    telegram.send_text(1004, "HTML please")
    (reply,) = telegram.wait_for_messages(1004, 1)
    assert reply["text"] == "bold and code & more"
    assert "html" not in reply  # sent without parse_mode
    gateway.wait_for_line(r"refused the HTML of a message to 1004")


def test_a_flood_limit_on_one_chat_never_delays_another(
    gateway: GatewayProcess, telegram: FakeTelegram
) -> None:
    telegram.fail_next("sendMessage", chat_id=1005, retry_after=3)
    telegram.send_text(1005, "first chat")
    refused = ("sendmessage", 1005)
    wait_until(
        lambda: refused in [(m, p.get("chat_id")) for m, p in telegram.calls],
        what="the refused send",
    )
    telegram.send_text(1006, "second chat")  # while chat 1005 waits out its flood limit
    (late,) = telegram.wait_for_messages(1005, 1)
    assert late["text"].endswith("first chat")
    sends = [
        at
        for (method, params), at in zip(telegram.calls, telegram.call_times, strict=True)
        if (method, params.get("chat_id")) == refused
    ]
    assert sends[1] - sends[0] >= 2.9  # retry_after was waited out (the server's own clock)
    order = [m["chat"]["id"] for m in telegram.sent_messages() if m["chat"]["id"] in (1005, 1006)]
    assert order == [1006, 1005]  # the other chat was answered meanwhile


def test_new_starts_a_fresh_session(
    gateway: GatewayProcess, telegram: FakeTelegram, llm: FakeOpenAI
) -> None:
    telegram.send_text(1007, "remember the blue door")
    telegram.wait_for_messages(1007, 1)
    telegram.send_text(1007, "/new")
    assert texts(telegram.wait_for_messages(1007, 2))[1].startswith("New session started.")
    telegram.send_text(1007, "what now")
    telegram.wait_for_messages(1007, 3)
    (fresh,) = asked(llm, "what now")
    assert not any("blue door" in text for text in user_texts(fresh))


def test_help_and_unknown_commands(gateway: GatewayProcess, telegram: FakeTelegram) -> None:
    telegram.send_text(1008, "/help")
    assert "/new" in telegram.wait_for_messages(1008, 1)[0]["text"]
    telegram.send_text(1008, "/bogus")
    assert texts(telegram.wait_for_messages(1008, 2))[1] == "Unknown command /bogus — try /help."


def test_memory_commands_work_in_both_spellings(
    gateway: GatewayProcess, telegram: FakeTelegram
) -> None:
    replies = []  # from the owner (the first allowed id), whose chat had its warm-up reply
    for number, text in enumerate(("/dream_restore", "/dream-restore", "/dream_log"), start=2):
        telegram.send_text(1000, text)
        replies.append(texts(telegram.wait_for_messages(1000, number))[-1])
    restore, hyphenated, log = replies
    assert restore == hyphenated and restore.startswith("Memory versions")
    assert not log.startswith("Unknown command")


def test_stop_cancels_a_slow_turn(
    gateway: GatewayProcess, telegram: FakeTelegram, llm: FakeOpenAI
) -> None:
    telegram.send_text(1009, "SLOW question")
    wait_until(lambda: asked(llm, "SLOW question"), what="the model to be asked")
    telegram.send_text(1009, "/stop")
    assert texts(telegram.wait_for_messages(1009, 1)) == ["Stopped."]
    telegram.send_text(1009, "still there?")
    replies = texts(telegram.wait_for_messages(1009, 2))
    assert replies[1].endswith("still there?")
    assert "the slow answer" not in replies


def test_health_reports_and_turns_503_while_the_token_is_refused(
    gateway: GatewayProcess, telegram: FakeTelegram
) -> None:
    queues = {"inbound": 0, "inbox": 0}  # all delivered (earlier tests' last steps may still run)
    status, body = wait_until(
        lambda: (h := gateway.health())[1]["queues"] | queues == h[1]["queues"] and h,
        what="the queues to drain",
    )
    assert status == 200 and body["status"] == "ok"
    assert body["channels"]["telegram"]["state"] == "up"
    assert body["last_dream"] == LAST_DREAM and body["uptime_s"] > 0
    telegram.set_token_valid(False)
    try:
        telegram.send_text(1010, "wakes the long poll")  # the next poll meets the 401
        status, body = wait_until(
            lambda: (h := gateway.health())[0] == 503 and h,
            what="/health to report the refused token",
        )
        assert body["channels"]["telegram"] == body["channels"]["telegram"] | {
            "state": "down",
            "detail": TOKEN_REJECTED,
        }
    finally:
        telegram.set_token_valid(True)
    wait_until(lambda: gateway.health()[0] == 200, what="polling to recover")
    telegram.send_text(1010, "back again")
    wait_until(
        lambda: any(t.endswith("back again") for t in texts(telegram.sent_messages(1010))),
        what="an answer after recovery",
    )
    log = (gateway.home.logs / "nanomem.log").read_text() + "".join(gateway.lines)
    assert TOKEN_REJECTED in log and telegram.token not in log  # PTB's errors are redacted


@pytest.fixture
def own_servers() -> Iterator[tuple[FakeTelegram, FakeOpenAI]]:
    """For a gateway of its own: two gateways polling one bot would steal each other's updates."""
    with FakeTelegram() as telegram, FakeOpenAI() as llm:
        llm.set_fallback(scripted)
        yield telegram, llm


def test_sigterm_lets_running_turns_finish_within_the_grace_period(
    own_servers: tuple[FakeTelegram, FakeOpenAI], tmp_path: Path
) -> None:
    telegram, llm = own_servers
    home = Home(tmp_path / "home")
    process = GatewayProcess(home, telegram, llm, NANOMEM_GATEWAY__GRACE_S="10")
    telegram.send_text(1011, "LATE question")  # answered during the grace period
    telegram.send_text(1012, "SLOW question")  # never answered: cut short when the grace ends
    wait_until(
        lambda: asked(llm, "LATE question") and asked(llm, "SLOW question"),
        what="both turns to reach the model",
    )
    process.proc.send_signal(signal.SIGTERM)
    process.wait_for_line("gateway: stopping")
    llm.release()  # the late answer arrives while the gateway is stopping
    # The slow turn would take an hour: a stop within WAIT_S means the grace period ended it.
    assert process.stop(None) == 0, "".join(process.lines)
    assert texts(telegram.sent_messages(1011)) == ["the late answer"]
    assert texts(telegram.sent_messages(1012)) == []  # nobody is asked to send it again
    session = load_session(home, "telegram:1012")
    assert session.messages[0]["role"] == "user"
    assert session.messages[0]["content"].endswith("SLOW question")

    # The next start answers it: the saved message goes on, it is not saved a second time.
    llm.set_fallback(lambda request: Step.reply("the slow answer, at last"))
    restarted = GatewayProcess(home, telegram, llm)
    telegram.wait_for_messages(1012, 1, timeout=30)
    assert restarted.stop() == 0, "".join(restarted.lines)
    assert texts(telegram.sent_messages(1012)) == ["the slow answer, at last"]
    assert texts(telegram.sent_messages(1011)) == ["the late answer"]  # not sent twice
    turn = [(m["role"], m["content"]) for m in load_session(home, "telegram:1012").messages]
    assert turn[1:] == [("assistant", "the slow answer, at last")]
    assert len(turn) == 2 and turn[0][1].endswith("SLOW question")


def test_a_second_signal_stops_at_once(
    own_servers: tuple[FakeTelegram, FakeOpenAI], tmp_path: Path
) -> None:
    telegram, llm = own_servers
    home = Home(tmp_path / "home")
    process = GatewayProcess(home, telegram, llm, NANOMEM_GATEWAY__GRACE_S=str(NEVER_S))
    telegram.send_text(1013, "SLOW and patient")
    wait_until(lambda: asked(llm, "SLOW and patient"), what="the model to be asked")
    process.proc.send_signal(signal.SIGTERM)
    process.wait_for_line("a second signal stops at once")
    # Neither the turn nor the grace period would end within WAIT_S: the second signal did.
    assert process.stop(signal.SIGINT) == 130, "".join(process.lines)
    process.wait_for_line("gateway: stopping at once")
    session = load_session(home, "telegram:1013")
    assert session.messages[0]["content"].endswith("SLOW and patient")


@pytest.mark.parametrize("spacing_s", [0.1, 0.5, 1.0])
def test_a_second_signal_to_an_idle_gateway_exits_130_at_any_moment(
    tmp_path: Path, spacing_s: float
) -> None:
    with FakeOpenAI() as llm:
        process = GatewayProcess(Home(tmp_path / "home"), None, llm)
        process.proc.send_signal(signal.SIGTERM)
        # Two signals sent while the machine did not run the process in between are one
        # pending signal (POSIX does not queue them): the spacing counts from the first's
        # arrival, not from its sending.
        process.wait_for_line("a second signal stops at once")
        time.sleep(spacing_s)
        # Frozen where it is; a process already leaving (os._exit done, the kernel still
        # tearing it down: not yet reaped) takes no signal any more and ends instead.
        process.proc.send_signal(signal.SIGSTOP)
        if wait_until(lambda: frozen_or_gone(process.proc), what="SIGSTOP") == "gone":
            assert process.stop(None) == 0, "".join(process.lines)  # the first one's exit
            return
        process.proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        process.proc.send_signal(signal.SIGCONT)
        code = process.stop(None)
    assert code == 130, "".join(process.lines)
    assert time.monotonic() - sent < 3.0  # at once: not after the workers or the interpreter


def frozen_or_gone(proc: subprocess.Popen[str]) -> str | None:
    """Whether the process has ended ("gone") or SIGSTOP has stopped it ("frozen"), or None."""
    if proc.poll() is not None:
        return "gone"
    try:
        state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None
    return "frozen" if state in ("T", "t") else None
