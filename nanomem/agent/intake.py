"""Intake: a message saved in its session before its turn begins, so that neither a /stop nor
a crash can lose it; or found there again (a replayed message, an API client's retried
request, /retry), so that it is never saved twice."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from nanomem.agent.feature import ReadMedia, Unreadable, read_media
from nanomem.agent.replay import find_message, finished_reply, last_user, turn_after

if TYPE_CHECKING:
    from nanomem.agent.bus import InboundMessage
    from nanomem.agent.context import ContextBuilder
    from nanomem.agent.paused_turns import ClientTurns
    from nanomem.agent.templates import Templates
    from nanomem.config import Settings
    from nanomem.memory import Session, SessionStore


class Intake:
    def __init__(
        self,
        sessions: SessionStore,
        context: ContextBuilder,
        templates: Templates,
        settings: Settings,
        clients: ClientTurns,
        read_media: list[ReadMedia],  # the loop's list, which features add to
    ) -> None:
        self.sessions, self.context, self.templates = sessions, context, templates
        self.settings, self.clients, self.read_media = settings, clients, read_media

    async def retried(self, msg: InboundMessage) -> tuple[Session, int | None]:
        """The chat's last message, when it is still unanswered (None otherwise)."""
        session = await self.sessions.get(msg.session_key)
        last = last_user(session.messages)
        if last is None or last < session.replay_from:
            return session, None
        if finished_reply(session.messages, last) is not None:
            return session, None
        if session.messages[last].get("unread"):  # its files could not be read
            return session, await self._reread(msg, session, last)
        return session, last

    async def _reread(self, msg: InboundMessage, session: Session, at: int) -> int:
        """A message whose files could not be read, read again and saved anew (Unreadable:
        still not, and nothing is saved); where it is now."""
        user = session.messages[at]
        files = replace(msg, media=tuple(user["unread"]), lengths=user.get("lengths") or {})
        read = await read_media(self.read_media, files)
        await self.sessions.append(session, [read.into(user)])
        return len(session.messages) - 1

    async def acknowledge(self, msg: InboundMessage) -> tuple[Session, int | None]:
        """The session and the index of the message in it: saved now, or found there when a
        replayed message had been saved before a crash."""
        session = await self.sessions.get(msg.session_key)
        if msg.client is not None and msg.client.results:  # a paused turn goes on
            return await self.clients.go_on(msg, session)
        if msg.replayed and (found := self._saved(msg, session)) is not None:
            messages = session.messages
            if finished_reply(messages, found) is not None:
                return session, found  # answered before the crash: that answer is sent
            if len(turn_after(messages, found)) == len(messages) - found - 1:
                if messages[found].get("unread"):  # never a turn without its files' text
                    return session, await self._reread(msg, session, found)
                return session, found  # still the session's last turn: it goes on
            # Other turns came after it (another process on this session): asked afresh.
        # The chat's kind, as its channel vouched, recorded with its first message saved.
        await self.sessions.mark_room(session, msg.sender.shared_room)
        # Documents become text once, here, and the session keeps it (agent/documents.py).
        room = self.settings.agent.max_message_chars - len(msg.content)
        documents = await self.context.documents(msg.media, room, msg.session_key)
        user = self.context.user_message(msg, documents=documents)
        if msg.seq is not None or msg.client is not None:
            user["in"] = msg.id  # how a replay (or a client's retried request) finds it again
        if msg.client is not None and msg.media:
            user["media"] = list(msg.media)  # shown again when a paused turn goes on
        try:  # a voice note's transcript too, made once (Feature.read_media)
            read = await read_media(self.read_media, msg)
        except Unreadable as exc:  # kept with its files named, for /retry to read again
            note = self.templates.render("media_unread.md.j2", line=exc.line)
            failed = {"role": "assistant", "content": note, "failed": "media"}
            unread = {**user, "unread": list(msg.media)}
            if msg.lengths:  # what the channel said of them, for /retry to hold to the limit
                unread["lengths"] = dict(msg.lengths)
            await self.sessions.append(session, [unread, failed])
            raise
        await self.sessions.append(session, [read.into(user)])
        return session, len(session.messages) - 1

    def _saved(self, msg: InboundMessage, session: Session) -> int | None:
        """Where a replayed message was saved: an API client's retried request can only be
        the session's last message (the same words yesterday are a new request)."""
        if msg.client is None:
            return find_message(session.messages, msg.id)
        last = last_user(session.messages)
        return last if last is not None and session.messages[last].get("in") == msg.id else None
