"""Shell commands approved from chat (tools.shell_approval).

`ask` (the default): before a command runs, the person whose message started the turn is asked
in that chat (Telegram: Allow once / Always allow `<first word>` / Deny buttons; the terminal:
y/N/always at its prompt). Where nobody can be asked (`chat -m`, the API), and when no answer
comes within tools.shell_approval_timeout_s, the command is denied, unless it matches the
persisted allowlist. `allowlist`: only listed prefixes run. `off`: everything runs.

The answer arrives while the turn that asked is still running, so its commands are immediate:
they never queue behind that turn.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from loguru import logger

from nanomem.agent import (
    Button,
    Command,
    InboundMessage,
    OutboundMessage,
    Question,
    fenced,
)
from nanomem.audience import Sender
from nanomem.durable import atomic_write_text
from nanomem.locks import FileLock
from nanomem.text import untrusted_json
from nanomem.tools import ToolContext

Mode = Literal["ask", "allowlist", "off"]
ALLOWLIST_VERSION = 1
Publish = Callable[[OutboundMessage], Awaitable[None]]
DENIED = "denied by the owner"
# A command that chains, substitutes or redirects is never matched by a prefix: `git status;
# rm -rf ~` must not pass as `git`.
_SHELL_SYNTAX = re.compile(r"[;&|`$<>(){}\n\r\\*?~!#]")
_PREFIX = re.compile(r"[A-Za-z0-9_./:=+@%-]+( [A-Za-z0-9_./:=+@%-]+)*")
# Programs that run whatever their arguments name: "always allow" one of them would allow
# every command written after it, so only "allow once" is offered.
# fmt: off
RUNNERS = frozenset({
    "env", "sudo", "doas", "su", "runuser", "pkexec", "nohup", "setsid", "nice", "ionice",
    "chrt", "taskset", "timeout", "time", "stdbuf", "unbuffer", "xargs", "parallel", "watch",
    "exec", "command", "builtin", "eval", "source", ".", "sh", "bash", "dash", "zsh", "ksh",
    "mksh", "fish", "csh", "tcsh", "busybox", "chroot", "script", "ssh", "flock", "strace",
    "ltrace", "gdb",
})
# fmt: on


def allowed_by(command: str, prefixes: list[str]) -> str | None:
    """The allowlist entry a plain command starts with (whole words), if any."""
    if _SHELL_SYNTAX.search(command):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    for prefix in prefixes:
        wanted = prefix.split()
        if wanted and words[: len(wanted)] == wanted:
            return prefix
    return None


def first_word(command: str) -> str | None:
    """What "Always allow" adds: the program a plain command runs."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if not words or _SHELL_SYNTAX.search(command) or not _PREFIX.fullmatch(words[0]):
        return None
    if "=" in words[0] or words[0].rsplit("/", 1)[-1] in RUNNERS:  # `X=1 ...`: a variable
        return None
    return words[0]


class Allowlist:
    """Command prefixes that run without asking; `<home>/shell-allowlist.json`, written
    atomically under the home's lock of the same name."""

    def __init__(self, path: Path, lock: FileLock) -> None:
        self.path, self.lock = path, lock

    def prefixes(self) -> list[str]:
        try:
            data = untrusted_json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except ValueError as exc:
            logger.error("shell: unreadable allowlist {} ({}); nothing allowed", self.path, exc)
            return []
        return [str(p) for p in data.get("prefixes", [])] if isinstance(data, dict) else []

    def add(self, prefix: str) -> None:
        with self.lock.hold_sync():
            prefixes = self.prefixes()
            if prefix not in prefixes:
                self._write([*prefixes, prefix])

    def remove(self, prefix: str) -> bool:
        with self.lock.hold_sync():
            prefixes = self.prefixes()
            if prefix not in prefixes:
                return False
            self._write([p for p in prefixes if p != prefix])
            return True

    def _write(self, prefixes: list[str]) -> None:
        data = {"v": ALLOWLIST_VERSION, "prefixes": prefixes}
        atomic_write_text(self.path, json.dumps(data, indent=2) + "\n", mode=0o600)


@dataclass
class _Question:
    command: str
    session: str
    sender: str
    answer: asyncio.Future[str] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class ShellApproval:
    def __init__(
        self,
        mode: Mode,
        timeout_s: float,
        allowlist: Allowlist,
        publish: Publish | None = None,
    ) -> None:
        self.mode, self.timeout_s, self.allowlist = mode, timeout_s, allowlist
        self.publish = publish
        self._questions: dict[str, _Question] = {}

    async def refusal(self, command: str, context: ToolContext) -> str | None:
        """None when the command may run; otherwise what the model is told instead."""
        if self.mode == "off":
            return None
        if allowed_by(command, await asyncio.to_thread(self.allowlist.prefixes)) is not None:
            return None
        if self.mode == "allowlist":
            return "refused: the command does not match tools.shell_approval's allowlist"
        asker, session = context.sender, context.session
        # Only the owner approves: the command runs on their machine, whoever else may chat.
        present = asker.can_answer and asker.is_owner
        if session is None or not present or self.publish is None:
            return f"{DENIED}: nobody can approve commands here; only allowlisted ones run"
        return await self._ask(session, asker, command)

    async def _ask(self, session: str, asker: Sender, command: str) -> str | None:
        key = uuid.uuid4().hex[:8]
        question = _Question(command, session, asker.id)
        self._questions[key] = question
        word = first_word(command)
        buttons = [Button("Allow once", f"/shell-allow {key}")]
        if word is not None:
            buttons.append(Button(f"Always allow {word}", f"/shell-always {key}"))
        buttons.append(Button("Deny", f"/shell-deny {key}"))
        text = f"Run this command?\n\n{fenced(command)}"
        channel, _, chat = session.partition(":")
        ask = OutboundMessage(channel, chat, Question(text, tuple(buttons)))
        try:
            assert self.publish is not None
            await self.publish(ask)
            choice = await asyncio.wait_for(asyncio.shield(question.answer), self.timeout_s)
        except TimeoutError:
            logger.info("shell: no answer within {:g} s; denied: {}", self.timeout_s, command)
            return f"{DENIED} (no answer within {self.timeout_s:g} s)"
        finally:
            self._questions.pop(key, None)
        return None if choice in ("once", "always") else DENIED

    # Commands: the answers, and the allowlist.

    def commands(self) -> list[Command]:
        commands = []
        for name, summary, handler, usage in (
            ("shell-allow", "run the shell command asked about, once", self._once, "<id>"),
            ("shell-always", "run it, and its program from now on", self._always, "<id>"),
            ("shell-deny", "refuse the shell command asked about", self._deny, "<id>"),
            ("allowed", "list the commands that run without asking", self._allowed, ""),
            ("disallow", "ask again before commands with that prefix", self._disallow, "<prefix>"),
        ):
            listed = not name.startswith("shell-")  # the buttons send these
            command = Command(
                name, summary, handler, usage=usage, immediate=True, listed=listed, owner_only=True
            )
            commands.append(command)
        return commands

    async def _answer(self, msg: InboundMessage, key: str, choice: str) -> str | _Question:
        question = self._questions.get(key.strip())
        if question is None or question.answer.done():
            return "That question is no longer open (answered, or timed out and denied)."
        if (msg.session_key, msg.sender.id) != (question.session, question.sender):
            return "Only the person whose message started this can answer it."
        question.answer.set_result(choice)
        return question

    async def _once(self, msg: InboundMessage, args: str) -> str:
        question = await self._answer(msg, args, "once")
        return question if isinstance(question, str) else "Allowed once."

    async def _deny(self, msg: InboundMessage, args: str) -> str:
        question = await self._answer(msg, args, "deny")
        return question if isinstance(question, str) else "Denied."

    async def _always(self, msg: InboundMessage, args: str) -> str:
        pending = self._questions.get(args.strip())
        word = first_word(pending.command) if pending is not None else None
        question = await self._answer(msg, args, "always" if word else "once")
        if isinstance(question, str):
            return question
        if word is None:
            return "Allowed once (only a plain command can be always allowed)."
        await asyncio.to_thread(self.allowlist.add, word)
        return f"Allowed: `{word}` commands now run without asking (/allowed, /disallow {word})."

    async def _allowed(self, msg: InboundMessage, args: str) -> str:
        prefixes = await asyncio.to_thread(self.allowlist.prefixes)
        if not prefixes:
            return "No command runs without asking (tools.shell_approval)."
        rows = "\n".join(f"- `{p}`" for p in prefixes)
        return f"These run without asking:\n{rows}\n\n/disallow <prefix> removes one."

    async def _disallow(self, msg: InboundMessage, args: str) -> str:
        prefix = " ".join(args.split())
        if not prefix:
            return "Usage: /disallow <prefix> (see /allowed)."
        if await asyncio.to_thread(self.allowlist.remove, prefix):
            return f"`{prefix}` commands will be asked about again."
        return f"`{prefix}` is not in the list; /allowed shows it."
