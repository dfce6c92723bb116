"""Slash commands: parsed before the model ever sees a message."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from nanomem.agent.bus import InboundMessage
from nanomem.agent.outbound import Button

# "/name", "/name@bot", "/name args"; a path such as "/etc/hosts" is not a command.
_COMMAND = re.compile(r"^/([A-Za-z][A-Za-z0-9_-]{0,31})(?:@[A-Za-z0-9_]+)?(?:\s+(.*))?$", re.S)


@dataclass(frozen=True)
class Answer:
    """A command's reply with buttons under it (a plain `str` has none)."""

    text: str
    buttons: tuple[Button, ...] = ()


Handler = Callable[[InboundMessage, str], Awaitable[str | Answer]]
OWNER_ONLY = "Only the owner can use /{name}; nothing was done."
# /stop's two answers; channels compare against them to know whether a turn was cut short.
STOPPED = "Stopped."
NOTHING_TO_STOP = "Nothing is running."


@dataclass(frozen=True)
class Command:
    name: str
    summary: str
    # None: the command is a whole turn the loop runs itself (/retry), not a line of text.
    handler: Handler | None
    usage: str = ""
    # Runs at once instead of queueing behind the chat's running turn (e.g. /stop).
    immediate: bool = False
    # In /help and Telegram's menu; False for what only buttons send (/shell-allow <id>).
    listed: bool = True
    # Only the owner's message runs it (in a group, another member's gets OWNER_ONLY): it
    # changes or shows what is theirs (approvals, the allowlist, memory and its versions).
    owner_only: bool = False

    def refusal(self, msg: InboundMessage) -> str | None:
        """Why this message may not run the command; None when it may."""
        if self.owner_only and not msg.sender.is_owner:
            return OWNER_ONLY.format(name=self.name)
        return None


class UnknownCommand(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def parse_command(text: str) -> tuple[str, str] | None:
    """(canonical name, arguments) or None; Telegram's `dream_log` means `dream-log`."""
    match = _COMMAND.match(text.strip())
    if match is None:
        return None
    return match.group(1).lower().replace("_", "-"), (match.group(2) or "").strip()


class CommandSet:
    def __init__(self) -> None:
        self._commands: dict[str, Command] = {}
        self._later: list[Callable[[], list[Command]]] = []
        self._fallbacks: dict[str, Command] = {}

    def register(self, command: Command) -> None:
        self._commands[command.name] = command

    def register_later(self, commands: Callable[[], list[Command]]) -> None:
        """Commands asked for when the first command is looked up or listed (a feature's: a
        turn of ordinary text never loads the machinery behind them), in this order."""
        self._later.append(commands)

    def fallback(self, command: Command) -> None:
        """Answers its name when nothing registered it (a feature that is off says how to turn
        it on, instead of "Unknown command"); never listed."""
        self._fallbacks[command.name] = command

    def resolve(self, text: str) -> tuple[Command, str] | None:
        """The command a message invokes, None for ordinary text; UnknownCommand if unknown."""
        parsed = parse_command(text)
        if parsed is None:
            return None
        name, args = parsed
        command = self._registered().get(name) or self._fallbacks.get(name)
        if command is None:
            raise UnknownCommand(name)
        return command, args

    def named(self, text: str) -> str:
        """The name of the command a message runs ("" for ordinary text), known or not."""
        try:
            found = self.resolve(text)
        except UnknownCommand as exc:
            return exc.name
        return found[0].name if found else ""

    def all(self) -> list[Command]:
        return list(self._registered().values())

    def _registered(self) -> dict[str, Command]:
        while self._later:
            for command in self._later.pop(0)():
                self.register(command)
        return self._commands


def fenced(text: str, info: str = "") -> str:
    """A Markdown code block that holds `text` as written: its fence is longer than any run
    of backquotes inside, so a line such as "```" cannot end it early (and nothing after it
    is shown as Markdown: a link hides what it wraps)."""
    fence = "`" * max([3, *(len(run) + 1 for run in re.findall(r"`+", text))])
    return f"{fence}{info}\n{text}\n{fence}"
