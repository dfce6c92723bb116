"""One driver per channel for the contract suite (tests/contract/): the real gateway process with
that channel enabled against its loopback platform, and what a person and the platform do there,
in the same words for every channel. A channel that lacks a capability says so here
(`streams`, `buttons`); the suite then checks what it does instead.

People: "owner", "friend" (allowed), "stranger" (not). Chats: each person's private chat, and
one group the owner and the friend are in, where the bot is addressed by a mention."""

from __future__ import annotations

import json
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from nanomem.home import Home
from nanomem.text.measure import utf16_units
from tests.fakes.discord_server import GENERAL, FakeDiscord
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import discord as dc
from tests.helpers import matrix as mx
from tests.helpers import slack as sl
from tests.helpers import wait_until
from tests.helpers.gateway import GatewayProcess, user_texts
from tests.helpers.line_gateway import HISTORY, LIMIT_FILE
from tests.helpers.line_people import USER_FACT

LONG = "\n\n".join(f"Paragraph {n:03d} 🙂: " + "lorem ipsum dolor sit amet " * 4 for n in range(60))
GROWING = " ".join(f"piece{n}" for n in range(40))
APPROVAL_ASKED = "Run this command?"
ENV = {"NANOMEM_TOOLS__SHELL_ENABLED": "true", "NANOMEM_GATEWAY__GRACE_S": "3"}


def contract_model() -> Callable[[dict[str, Any]], Step]:
    """The model every driver's gateway talks to, chosen by a keyword in the last message: HOLD
    is held the first time (until `llm.release()`), answered at once after; GROW streams (and
    HOLDGROW is held halfway through the first time); LONG
    is longer than any platform's message; RUN asks to run a shell command; anything else is
    said back as "echo: <the person's words>"."""
    held: set[str] = set()

    def answer(request: dict[str, Any]) -> Step:
        last = request["messages"][-1]
        if last.get("role") == "tool":
            return Step.reply(f"result: {str(last['content'])[:80]}")
        said = user_texts(request)[-1].splitlines()[-1] if user_texts(request) else ""
        if "HOLDGROW" in said:  # held halfway the first time, half shown; its replay at once
            first = said not in held
            held.add(said)
            if first:
                return Step.reply(GROWING, pieces=16, pause=0.15, hold_after=8)
            return Step.reply(GROWING, pieces=16)
        if "HOLD" in said:
            first = said not in held
            held.add(said)
            return Step.reply(f"held answer to {said}", hold_after=0 if first else None)
        if "GROW" in said:
            return Step.reply(GROWING, pieces=16, pause=0.25)
        if "LONG" in said:
            return Step.reply(LONG)
        if "RUN " in said:
            return Step.tool_call("exec", {"command": said.split("RUN ", 1)[1].strip()})
        return Step.reply(f"echo: {said}")

    return answer


class Driver:
    """A channel's gateway and platform, as the contract suite speaks of them."""

    name = ""
    streams = True  # a growing reply is shown growing (edits or drafts), at a bounded rate;
    # in groups too (each driver's gateway sets stream_groups)
    buttons = True  # a question comes with buttons; False: its choices as text, typed back
    command_prefix = "/"  # how the channel writes a command, a typed choice among them
    limit = 0  # the platform's longest message, in `measure`
    edit_gap_s = 1.0  # the platform's bound on edits to a growing message
    PEOPLE: ClassVar[dict[str, Any]] = {}  # the owner, the friend and the stranger's user ids
    # Contract cases this channel is known to fail, by name, with why: run as strict xfails.
    KNOWN_DEFECTS: ClassVar[dict[str, str]] = {}

    def __init__(self, home: Home, llm: FakeOpenAI) -> None:
        self.home, self.llm = home, llm
        self.gateway: GatewayProcess | None = None

    @staticmethod
    def measure(text: str) -> int:
        return len(text)

    # The gateway's life.

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> int:
        assert self.gateway is not None
        return self.gateway.stop()

    def kill(self) -> None:
        assert self.gateway is not None
        self.gateway.stop(signal.SIGKILL)

    def log(self) -> str:
        assert self.gateway is not None
        return "".join(self.gateway.lines)

    # A person, and what the bot posted.

    def say(self, who: str, text: str, *, group: bool = False) -> None:
        raise NotImplementedError

    def posted(self, who: str, *, group: bool = False) -> list[str]:
        """The bot's messages in the chat, as they read now (progress lines left out)."""
        raise NotImplementedError

    def stream_times(self, who: str, since: float, *, group: bool = False) -> list[float]:
        """When a growing reply in the chat was shown anew (edits, drafts) since `since`."""
        raise NotImplementedError

    def approve(self, who: str) -> None:
        """Answer the newest question in `who`'s chat with its first choice: a press or typed."""
        raise NotImplementedError

    def rate_limit(self, times: int, seconds: float) -> None:
        """The platform refuses the next `times` replies, asking to wait `seconds`."""
        raise NotImplementedError

    def wait_posted(
        self,
        who: str,
        found: Callable[[list[str]], bool],
        what: str,
        *,
        group: bool = False,
        timeout: float = 30.0,
    ) -> list[str]:
        wait_until(lambda: found(self.posted(who, group=group)), timeout=timeout, what=what)
        return self.posted(who, group=group)


class TelegramDriver(Driver):
    name = "telegram"
    limit = 4096  # UTF-16 code units of the text as shown
    PEOPLE: ClassVar[dict[str, Any]] = {"owner": 1000, "friend": 1001, "stranger": 666}
    GROUP = -100777
    MENTION = "@nanomem_test_bot "

    def __init__(self, home: Home, llm: FakeOpenAI) -> None:
        super().__init__(home, llm)
        self.fake = FakeTelegram().start()

    @staticmethod
    def measure(text: str) -> int:
        return utf16_units(text)

    def start(self) -> None:
        allow = [self.PEOPLE["owner"], self.PEOPLE["friend"], self.GROUP]
        env = {
            "NANOMEM_TELEGRAM__ALLOW_FROM": json.dumps(allow),
            "NANOMEM_TELEGRAM__OWNER": str(self.PEOPLE["owner"]),
            "NANOMEM_TELEGRAM__STREAM_GROUPS": "true",
        }
        self.gateway = self._gateway(**(ENV | env))

    def _gateway(self, **env: str) -> GatewayProcess:
        return GatewayProcess(self.home, self.fake, self.llm, **env)

    def close(self) -> None:
        self.fake.stop()

    def _chat(self, who: str, group: bool) -> int:
        return self.GROUP if group else self.PEOPLE[who]

    def say(self, who: str, text: str, *, group: bool = False) -> None:
        if group:
            self.fake.send_text(self.GROUP, self.MENTION + text, chat_type="supergroup",
                                user_id=self.PEOPLE[who])  # fmt: skip
        else:
            self.fake.send_text(self.PEOPLE[who], text)

    def posted(self, who: str, *, group: bool = False) -> list[str]:
        shown = (str(m.get("text") or "") for m in self.fake.sent_messages(self._chat(who, group)))
        return [t for t in shown if not t.startswith("⚙")]

    def stream_times(self, who: str, since: float, *, group: bool = False) -> list[float]:
        chat = self._chat(who, group)
        shown = self.fake.drafts(chat) + self.fake.edits(chat)
        return sorted(s["at"] for s in shown if s["at"] >= since)

    def approve(self, who: str) -> None:
        asked = [m for m in self.fake.sent_messages(self.PEOPLE[who]) if m.get("reply_markup")]
        question = asked[-1]
        self.fake.press(question, FakeTelegram.button_data(question, "Allow once"),
                        user_id=self.PEOPLE[who])  # fmt: skip

    def rate_limit(self, times: int, seconds: float) -> None:
        wait = int(seconds)
        said = f"Too Many Requests: retry after {wait}"
        self.fake.fail_next("sendMessage", retry_after=wait, times=times, description=said)


class TelegramWebhookDriver(TelegramDriver):
    """Telegram with telegram.mode = "webhook": the fake Bot API posts each update to the
    gateway's webhook route, again until it is answered 200, as Telegram does."""

    name = "telegram-webhook"
    URL = "https://bot.example.org/telegram/hook"

    def _gateway(self, **env: str) -> GatewayProcess:
        hook = {"NANOMEM_TELEGRAM__MODE": "webhook", "NANOMEM_TELEGRAM__WEBHOOK_URL": self.URL}
        gateway = GatewayProcess(self.home, self.fake, self.llm, **(env | hook))
        self.fake.forward_webhook_to(f"http://127.0.0.1:{gateway.port}")
        gateway.wait_for_line(r"telegram: webhook as @")  # never polling
        return gateway

    def stop(self) -> int:
        assert self.fake.getupdates_count == 0, "it polled"
        return super().stop()


class DiscordDriver(Driver):
    name = "discord"
    limit = 2000  # characters (code points) of the content
    PEOPLE: ClassVar[dict[str, Any]] = {
        "owner": dc.OWNER,
        "friend": dc.FRIEND,
        "stranger": dc.STRANGER,
    }

    def __init__(self, home: Home, llm: FakeOpenAI) -> None:
        super().__init__(home, llm)
        self.fake = FakeDiscord().__enter__()

    def start(self) -> None:
        env = ENV | {"NANOMEM_DISCORD__STREAM_GROUPS": "true"}
        self.gateway = dc.DiscordGateway(self.home, self.fake, self.llm, **env)

    def kill(self) -> None:
        super().kill()
        self.fake.wait(lambda: not self.fake.connected())

    def close(self) -> None:
        self.fake.__exit__(None, None, None)

    def _chat(self, who: str, group: bool) -> str:
        return GENERAL if group else self.fake.dm_channel(self.PEOPLE[who])

    def say(self, who: str, text: str, *, group: bool = False) -> None:
        if group:
            self.fake.say(GENERAL, self.PEOPLE[who], text, mention=True)
        else:
            self.fake.dm(self.PEOPLE[who], text)

    def posted(self, who: str, *, group: bool = False) -> list[str]:
        shown = (str(m["content"]) for m in self.fake.sent(self._chat(who, group)))
        return [t for t in shown if not t.startswith("⚙")]

    def stream_times(self, who: str, since: float, *, group: bool = False) -> list[float]:
        messages = self.fake.sent(self._chat(who, group))
        return sorted(t for m in messages for t in m.get("edits", []) if t >= since)

    def approve(self, who: str) -> None:
        chat = self._chat(who, False)
        question = [m for m in self.fake.sent(chat) if m.get("components")][-1]
        allow = question["components"][0]["components"][0]["custom_id"]
        self.fake.press(chat, self.PEOPLE[who], question["id"], allow)

    def rate_limit(self, times: int, seconds: float) -> None:
        self.fake.rate_limit("create", times=times, retry_after=seconds)


class SlackDriver(Driver):
    name = "slack"
    limit = 4000  # characters: Slack truncates a message's text past 40,000, advises 4,000
    PEOPLE: ClassVar[dict[str, Any]] = {
        "owner": sl.OWNER,
        "friend": sl.MEMBER,
        "stranger": sl.STRANGER,
    }
    DMS: ClassVar[dict[str, str]] = {
        "owner": sl.DM,
        "friend": sl.MEMBER_DM,
        "stranger": sl.STRANGER_DM,
    }

    def __init__(self, home: Home, llm: FakeOpenAI) -> None:
        super().__init__(home, llm)
        self.fake = sl.slack_fake()

    def start(self) -> None:
        env = ENV | {"NANOMEM_SLACK__STREAM_GROUPS": "true"}
        self.gateway = sl.slack_gateway(self.home, self.fake, self.llm, **env)

    def close(self) -> None:
        self.fake.stop()

    def _chat(self, who: str, group: bool) -> str:
        return sl.GENERAL if group else self.DMS[who]

    def say(self, who: str, text: str, *, group: bool = False) -> None:
        if group:
            self.fake.send_message(sl.GENERAL, self.PEOPLE[who], f"{sl.MENTION} {text}")
        else:
            self.fake.send_message(self.DMS[who], self.PEOPLE[who], text)

    def posted(self, who: str, *, group: bool = False) -> list[str]:
        shown = sl.replies(self.fake, self._chat(who, group))
        return [t for t in shown if not t.startswith("⚙")]

    def stream_times(self, who: str, since: float, *, group: bool = False) -> list[float]:
        chat = self._chat(who, group)
        return sorted(u["at"] for u in self.fake.updates
                      if u.get("channel") == chat and u["at"] >= since)  # fmt: skip

    def approve(self, who: str) -> None:
        question = sl.blocks_message(self.fake, self.DMS[who], "Allow once")
        self.fake.press(question, "Allow once", self.PEOPLE[who])

    def rate_limit(self, times: int, seconds: float) -> None:
        self.fake.fail("chat.postMessage", "ratelimited", times=times, status=429,
                       retry_after=int(seconds))  # fmt: skip


class LineDriver(Driver):
    """The worked example of docs/channels.md in its test gateway (tests/helpers/line_gateway):
    plain lines, no streaming, no buttons (a question's choices come as text, typed back)."""

    name = "line"
    streams = False
    buttons = False
    limit = 1000  # LINE_MAX_CHARS: a person's client with a short line buffer
    PEOPLE: ClassVar[dict[str, Any]] = {"owner": "ada", "friend": "bea", "stranger": "eve"}
    ROOM = "!team:x"  # a room whose id reads nothing like Telegram's "-…"

    def __init__(self, home: Home, llm: FakeOpenAI) -> None:
        super().__init__(home, llm)
        self.port = 0
        self._sockets: dict[tuple[str, bool], Any] = {}

    def start(self) -> None:
        env = ENV | {"LINE_OWNER": "ada", "LINE_ALLOW": "bea", "LINE_MAX_CHARS": str(self.limit)}
        self.gateway = GatewayProcess(self.home, None, self.llm,
                                      command=[sys.executable, "-m", "tests.helpers.line_gateway"],
                                      **env)  # fmt: skip
        self.port = int(self.gateway.wait_for_line(r"line: running on port (\d+)").group(1))
        self._sockets.clear()

    def close(self) -> None:
        for sock in self._sockets.values():
            sock.close()

    def _chat(self, who: str, group: bool) -> str:
        return self.ROOM if group else f"dm-{self.PEOPLE[who]}"

    def _socket(self, who: str, group: bool) -> Any:
        import socket

        if (who, group) not in self._sockets:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            where = f"ROOM {self.ROOM}" if group else f"CHAT {self._chat(who, group)}"
            sock.sendall(f"HELLO {self.PEOPLE[who]} {where}\n".encode())
            self._sockets[(who, group)] = sock
        return self._sockets[(who, group)]

    def say(self, who: str, text: str, *, group: bool = False) -> None:
        self._socket(who, group).sendall(text.encode() + b"\n")

    def posted(self, who: str, *, group: bool = False) -> list[str]:
        path = Path(self.home.root) / HISTORY / f"{self._chat(who, group)}.jsonl"
        if not path.exists():
            return []
        shown = [json.loads(line)["text"] for line in path.read_text().splitlines()]
        return [t for t in shown if not t.startswith("⚙")]

    def stream_times(self, who: str, since: float, *, group: bool = False) -> list[float]:
        return []  # nothing is shown growing: a reply comes whole

    def approve(self, who: str) -> None:
        asked = next(t for t in reversed(self.posted(who)) if APPROVAL_ASKED in t)
        typed = re.search(r"(/shell-allow \S+)", asked)
        assert typed is not None, f"no choice to type in {asked!r}"
        self.say(who, typed.group(1))

    def rate_limit(self, times: int, seconds: float) -> None:
        (Path(self.home.root) / LIMIT_FILE).write_text(f"{times} {seconds}")


class MatrixDriver(Driver):
    """Matrix against a Synapse of its own (tests/helpers/synapse.py; skipped without one),
    behind a gate that refuses as many of the bot's sends as asked the way Synapse's rate
    limiter does; people are matrix-nio clients (tests/helpers/matrix.py). Matrix has no
    buttons: choices are typed, with Matrix's `!`. Its limit is 64 KiB an event, past the
    contract's LONG: its model says the same 60 paragraphs, each long enough to pass it."""

    name = "matrix"
    buttons = False
    command_prefix = "!"
    limit = 65_536  # bytes of an event; measured on the content the channel would send
    edit_gap_s = 1.5  # matrix.stream_every_s
    PEOPLE: ClassVar[dict[str, Any]] = {
        who: f"@{who}:localhost" for who in ("owner", "friend", "stranger")
    }

    def __init__(self, home: Home, llm: FakeOpenAI) -> None:
        from tests.helpers.synapse import Synapse, synapse_or_skip

        super().__init__(home, llm)
        synapse_or_skip()
        self._folder = Path(tempfile.mkdtemp(prefix="contract-synapse-"))
        self.server = Synapse(self._folder).start()
        self.bot = self.server.register("nanomem")
        self.people = {who: mx.Person(self.server, self.server.register(who))
                       for who in self.PEOPLE}  # fmt: skip
        self.gate = mx.SendGate(self.server.url).start()
        self._rooms: dict[tuple[str, bool], str] = {}
        model = contract_model()
        llm.set_fallback(lambda request: _matrix_long(request) or model(request))

    @staticmethod
    def measure(text: str) -> int:
        from channels.matrix.events import measure

        return measure(text)

    def start(self) -> None:
        env = ENV | {
            "NANOMEM_MATRIX__ENABLED": "true",
            "NANOMEM_MATRIX__HOMESERVER": self.gate.url,
            "NANOMEM_MATRIX__USER_ID": self.bot.user_id,
            "NANOMEM_MATRIX__ACCESS_TOKEN": self.bot.token,
            "NANOMEM_MATRIX__OWNER": self.PEOPLE["owner"],
            "NANOMEM_MATRIX__ALLOW_FROM": json.dumps([self.PEOPLE["friend"]]),
            "NANOMEM_MATRIX__STREAM_GROUPS": "true",
        }
        self.gateway = GatewayProcess(self.home, None, self.llm, **env)
        self.gateway.wait_for_line(r"matrix: running")

    def close(self) -> None:
        self.gate.stop()
        self.server.stop()
        shutil.rmtree(self._folder, ignore_errors=True)

    def _room(self, who: str, group: bool) -> str:
        """The person's DM with the bot, or the group of the owner, the friend and the bot:
        made at first use, the bot in it before anything is said (what came before its join
        is history it never answers); a stranger's DM, which the bot never joins, at once."""
        key = ("owner", True) if group else (who, False)
        if key in self._rooms:
            return self._rooms[key]
        bot = self.bot.user_id
        if group:
            owner, friend = self.people["owner"], self.people["friend"]
            room = owner.room(bot, friend.user.user_id)
            friend.join(room)
        else:
            owner = self.people[who]
            room = owner.room(bot, direct=True)
        if who != "stranger":
            wait_until(lambda: bot in owner.joined(room), timeout=30, what="the bot to join")
        self._rooms[key] = room
        return room

    def say(self, who: str, text: str, *, group: bool = False) -> None:
        room = self._room(who, group)
        self.people[who].say(room, f"{self.bot.user_id}: {text}" if group else text)

    def _events(self, who: str, group: bool) -> list[dict[str, Any]]:
        key = ("owner", True) if group else (who, False)
        if key not in self._rooms:
            return []
        return self.people["owner" if group else who].events(self._rooms[key])

    def posted(self, who: str, *, group: bool = False) -> list[str]:
        shown = mx.bodies(self._events(who, group), self.bot.user_id)
        return [t for t in shown if not t.startswith("⚙")]

    def stream_times(self, who: str, since: float, *, group: bool = False) -> list[float]:
        """The growing message's post and its edits, by the homeserver's clock made monotonic."""
        ours = [e for e in self._events(who, group) if e.get("sender") == self.bot.user_id]
        edited = {
            str(relates.get("event_id"))
            for e in ours
            if (relates := e.get("content", {}).get("m.relates_to") or {}).get("rel_type")
            == "m.replace"
        }
        grew = [e for e in ours if e["event_id"] in edited or e["content"].get("m.new_content")]
        offset = time.time() - time.monotonic()
        times = (int(e["origin_server_ts"]) / 1000 - offset for e in grew)
        return sorted(t for t in times if t >= since)

    def approve(self, who: str) -> None:
        asked = next(t for t in reversed(self.posted(who)) if APPROVAL_ASKED in t)
        typed = re.search(r"(!shell-allow \S+)", asked)
        assert typed is not None, f"no choice to type in {asked!r}"
        self.say(who, typed.group(1))

    def rate_limit(self, times: int, seconds: float) -> None:
        self.gate.refuse_sends(times, seconds)


# Matrix's event holds 64 KiB: the contract's 60 paragraphs, each long enough to pass it.
MATRIX_LONG = "\n\n".join(
    f"Paragraph {n:03d} 🙂: " + "lorem ipsum dolor sit amet " * 60 for n in range(60)
)


def _matrix_long(request: dict[str, Any]) -> Step | None:
    said = user_texts(request)[-1].splitlines()[-1] if user_texts(request) else ""
    if "LONG" in said and not any(word in said for word in ("HOLD", "GROW", "RUN ")):
        return Step.reply(MATRIX_LONG)
    return None


DRIVERS: dict[str, type[Driver]] = {
    d.name: d
    for d in (
        TelegramDriver,
        TelegramWebhookDriver,
        DiscordDriver,
        SlackDriver,
        LineDriver,
        MatrixDriver,
    )
}
PERSONAL = USER_FACT  # written to the owner's USER.md: a group's turn never sees it


def kill_and_restart(driver: Driver, meanwhile: Callable[[], None]) -> None:
    """SIGKILL the gateway, do `meanwhile` while it is down, start it again on the same home."""
    driver.kill()
    meanwhile()
    time.sleep(0.1)
    driver.start()
