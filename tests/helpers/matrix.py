"""A person on the test homeserver, with matrix-nio as their client: rooms made, people
invited, messages sent, and what the bot wrote read back as a person's client shows it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from nio import AsyncClient, RoomCreateResponse, RoomMessagesResponse, RoomSendResponse

from tests.helpers.synapse import Synapse, User

ENCRYPTION = {"algorithm": "m.megolm.v1.aes-sha2"}


class Person:
    def __init__(self, server: Synapse, user: User) -> None:
        self.server, self.user = server, user

    def _run(self, step: Callable[[AsyncClient], Awaitable[Any]]) -> Any:
        async def run() -> Any:
            client = AsyncClient(self.server.url, self.user.user_id)
            client.access_token = self.user.token
            try:
                return await step(client)
            finally:
                await client.close()

        return asyncio.run(run())

    def room(self, *invite: str, direct: bool = False, encrypted: bool = False) -> str:
        state = [{"type": "m.room.encryption", "state_key": "", "content": ENCRYPTION}]

        async def step(client: AsyncClient) -> str:
            found = await client.room_create(
                invite=list(invite), is_direct=direct, initial_state=state if encrypted else ()
            )
            assert isinstance(found, RoomCreateResponse), found
            return found.room_id

        return str(self._run(step))

    def join(self, room: str) -> None:
        self.server.call("POST", f"/_matrix/client/v3/join/{room}", {}, self.user.token)

    def invite(self, room: str, user_id: str) -> None:
        body = {"user_id": user_id}
        self.server.call("POST", f"/_matrix/client/v3/rooms/{room}/invite", body, self.user.token)

    def say(self, room: str, text: str, *, kind: str = "m.room.message", **extra: Any) -> str:
        async def step(client: AsyncClient) -> str:
            content = {"msgtype": "m.text", "body": text, **extra}
            found = await client.room_send(room, kind, content)
            assert isinstance(found, RoomSendResponse), found
            return found.event_id

        return str(self._run(step))

    def events(self, room: str) -> list[dict[str, Any]]:
        """The room's messages, oldest first."""

        async def step(client: AsyncClient) -> list[dict[str, Any]]:
            found = await client.room_messages(room, limit=500)
            assert isinstance(found, RoomMessagesResponse), found
            return [e.source for e in reversed(found.chunk)]

        return list(self._run(step))

    def joined(self, room: str) -> list[str]:
        path = f"/_matrix/client/v3/rooms/{room}/joined_members"
        return list(self.server.call("GET", path, token=self.user.token)["joined"])


def shown(events: list[dict[str, Any]], sender: str) -> list[dict[str, Any]]:
    """`sender`'s messages as a client shows them: each original event's content as its last
    edit (m.new_content) left it; the edits themselves are not messages."""
    originals: dict[str, dict[str, Any]] = {}
    for event in events:
        if event.get("sender") != sender or event.get("type") != "m.room.message":
            continue
        content = event.get("content", {})
        relates = content.get("m.relates_to") or {}
        if relates.get("rel_type") == "m.replace":
            if relates.get("event_id") in originals:
                originals[relates["event_id"]] = content.get("m.new_content", {})
        else:
            originals[event["event_id"]] = content
    return list(originals.values())


def bodies(events: list[dict[str, Any]], sender: str) -> list[str]:
    return [str(c.get("body", "")) for c in shown(events, sender)]
