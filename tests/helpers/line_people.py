"""People on the line channel (tests/helpers/line_channel.py), and the gateway it runs in:
connections that say who is there and where, and what a turn showed the model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from nanomem.app import App, build_app
from nanomem.gateway.service import Gateway
from nanomem.home import Home
from nanomem.memory.session import session_filename
from nanomem.providers.scripted import ScriptedProvider
from tests.conftest import settings_for
from tests.helpers import until
from tests.helpers.line_channel import LineChannel

WAIT_S = 30.0


class Person:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def say(self, text: str) -> None:
        self.writer.write(text.encode() + b"\n")
        await self.writer.drain()

    async def hear(self) -> dict[str, Any]:
        line = await asyncio.wait_for(self.reader.readline(), WAIT_S)
        assert line, "the channel closed the connection"
        heard: dict[str, Any] = json.loads(line)
        return heard


async def connect(channel: LineChannel, name: str, where: str = "") -> Person:
    """A connection saying who is there, and where (`ROOM <id>`, `CHAT <id>`; by default a
    private chat of its own)."""
    person = Person(*await asyncio.open_connection("127.0.0.1", channel.port))
    await person.say(f"HELLO {name} {where}".rstrip())
    return person


async def running(app: App, channel: LineChannel) -> AsyncIterator[Gateway]:
    gateway = Gateway(app, {channel.name: channel})
    task = asyncio.create_task(gateway.run())
    await until(
        lambda: (
            channel.port
            and (r := gateway.health.channels.get("line")) is not None
            and r.state == "up"
        ),
        WAIT_S,
    )
    try:
        yield gateway
    finally:
        gateway.request_stop()
        await asyncio.wait_for(task, WAIT_S)


async def hear_reply(person: Person) -> dict[str, Any]:
    """The next reply, past notes and progress."""
    while (heard := await person.hear())["style"] != "reply":
        pass
    return heard


# A home whose owner has personal memory, for what a room must never see.

USER_FACT = "the owner's door code is 4711"
MEMORY_FACT = "the owner's locker code is 9876"
ROOM = "!team:x"


def app_for(home: Home, provider: ScriptedProvider, grace_s: float = 30.0) -> App:
    (home.workspace / "USER.md").write_text(f"# User\n- {USER_FACT}\n")
    (home.workspace / "memory" / "MEMORY.md").write_text(f"# Memory\n- {MEMORY_FACT}\n")
    settings = settings_for(home, gateway={"port": 0, "grace_s": grace_s})
    return build_app(settings, home, provider=provider, durable=True)


def personal(messages: list[dict[str, Any]]) -> bool:
    """Whether a model call carried any of the owner's personal memory."""
    shown = json.dumps(messages)
    return USER_FACT in shown or MEMORY_FACT in shown


def asked(provider: ScriptedProvider, words: str) -> list[dict[str, Any]]:
    """The model call whose last message says `words`."""
    return next(c for c in provider.calls if words in str(c[-1].get("content")))


def session_header(home: Home, key: str) -> dict[str, Any]:
    path = home.sessions / session_filename(key)
    header: dict[str, Any] = json.loads(path.read_text().splitlines()[0])
    return header
