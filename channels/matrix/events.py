"""Matrix events read and written: what a room message says and to whom, the sync filter, the
HTML a reply is sent as, its size as the homeserver counts it, and its transaction id."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nanomem.agent import Spelling, split_text
from nanomem.text.markdown_html import matrix_content
from nanomem.text.measure import json_bytes
from nanomem.text.utf8 import clean_text

# The homeserver refuses an event over 65,536 bytes of JSON; what it adds around the content
# (room, sender, ids, hashes and signatures) stays well within the difference. An edit carries
# its text twice: a growing reply shows at most half of this.
EVENT_LIMIT = 60_000
GROWN_LIMIT = EVENT_LIMIT // 2
MESSAGE = "m.room.message"
ENCRYPTED = "m.room.encrypted"
MEMBER = "m.room.member"
ENCRYPTION = "m.room.encryption"
# Only what the channel reads: messages, membership (a room's size changes) and whether a
# room is encrypted (in the timeline too: a room that turns encryption on while we run must
# never be answered in the clear); no presence, receipts, typing or account data.
SYNC_FILTER: dict[str, Any] = {
    "presence": {"not_types": ["*"]},
    "account_data": {"not_types": ["*"]},
    "room": {
        "timeline": {"types": [MESSAGE, ENCRYPTED, MEMBER, ENCRYPTION], "limit": 50},
        "state": {"types": [MEMBER, ENCRYPTION], "lazy_load_members": True},
        "ephemeral": {"not_types": ["*"]},
        "account_data": {"not_types": ["*"]},
    },
}
BANG = Spelling("!")  # Element keeps /… for its own commands: ours are typed !help here
FILE_TYPES = {"m.file": "file", "m.image": "image", "m.audio": "audio", "m.video": "video"}


@dataclass(frozen=True)
class Said:
    """A room message as the channel reads it."""

    event_id: str
    sender: str
    msgtype: str
    body: str
    mentions: tuple[str, ...]  # user ids in m.mentions
    reply_to: str  # the event it answers ("" when none)
    url: str = ""  # an attachment's mxc:// address
    file: dict[str, Any] | None = None  # an encrypted attachment's keys (url inside)
    file_name: str = ""
    size: int | None = None  # as the sender's client told it


def said(event: dict[str, Any]) -> Said | None:
    """A message a person wrote, or None for anything else (an edit, a notice, a reaction)."""
    content = event.get("content")
    if event.get("type") != MESSAGE or not isinstance(content, dict):
        return None
    relates = content.get("m.relates_to")
    relates = relates if isinstance(relates, dict) else {}
    if relates.get("rel_type") == "m.replace":
        return None  # an edit of an earlier message: that one was answered already
    msgtype = content.get("msgtype")
    if msgtype not in ("m.text", "m.emote", *FILE_TYPES):
        return None
    mentions = content.get("m.mentions")
    users = mentions.get("user_ids") if isinstance(mentions, dict) else None
    reply = relates.get("m.in_reply_to")
    info = content.get("info")
    size = info.get("size") if isinstance(info, dict) else None
    file = content.get("file")  # an encrypted room's attachment: the key to it, and its url
    file = file if isinstance(file, dict) else None
    url = file.get("url") if file is not None else content.get("url")
    return Said(
        event_id=_text(event.get("event_id")),
        sender=_text(event.get("sender")),
        msgtype=str(msgtype),
        body=clean_text(_text(content.get("body")))[:100_000],
        mentions=tuple(u for u in users[:100] if isinstance(u, str))
        if isinstance(users, list)
        else (),
        reply_to=_text(reply.get("event_id")) if isinstance(reply, dict) else "",
        url=_text(url),
        file=file,
        file_name=_text(content.get("filename") or content.get("body"))[:200],
        size=size if type(size) is int else None,
    )


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def inviter(invite_state: list[Any], user_id: str) -> str:
    """Who invited `user_id`, from a room invite's stripped state ("" when it does not say)."""
    for event in invite_state:
        source = getattr(event, "source", event)
        if (
            isinstance(source, dict)
            and source.get("type") == MEMBER
            and source.get("state_key") == user_id
        ):
            return _text(source.get("sender"))
    return ""


def names_us(message: Said, user_id: str, display_name: str) -> bool:
    """Mentioned by id or display name in the body, or in m.mentions."""
    if user_id in message.mentions:
        return True
    body = message.body.casefold()
    named = [user_id, display_name] if display_name else [user_id]
    return any(_word_in(name.casefold(), body) for name in named)


def _word_in(name: str, body: str) -> bool:
    return re.search(rf"(?<![\w@]){re.escape(name)}(?![\w])", body) is not None


def without_mention(text: str, user_id: str, display_name: str) -> str:
    """The words meant for us: a leading `name:` (how clients write a mention) taken off."""
    for name in filter(None, (user_id, display_name)):
        lead = re.match(rf"\s*{re.escape(name)}\s*[:,]?\s*", text, re.I)
        if lead:
            return text[lead.end() :]
    return text


def content(text: str, *, markdown: bool = True) -> dict[str, Any]:
    """An m.text event's content: the model's Markdown as Matrix's HTML subset (the shared
    renderer: its text is never markup) with a plain body; `markdown` False for a plain note,
    escaped as it is. An empty m.mentions says it mentions nobody: clients then ping no one
    for an `@room` or a name in it."""
    if markdown:
        found: dict[str, Any] = matrix_content(text)
    else:
        found = {
            "msgtype": "m.text",
            "body": text,
            "format": "org.matrix.custom.html",
            "formatted_body": html.escape(text).replace("\n", "<br/>"),
        }
    return {**found, "m.mentions": {}}


def edit(event_id: str, new: dict[str, Any]) -> dict[str, Any]:
    """An m.replace edit of `event_id` to the content `new` (`m.new_content` is what clients
    show; the outer body is for clients without edits)."""
    return {
        **new,
        "body": f"* {new['body']}",
        "formatted_body": f"* {new['formatted_body']}",
        "m.new_content": new,
        "m.relates_to": {"rel_type": "m.replace", "event_id": event_id},
    }


def measure(text: str) -> int:
    """Bytes of a reply's event content as the homeserver counts them."""
    return json_bytes(content(text))


def split(
    text: str, limit: int = EVENT_LIMIT, measure: Callable[[str], int] = measure
) -> list[str]:
    """Parts whose events weigh at most `limit` bytes each, cut where a reader would pause,
    code blocks kept whole (the core's splitter, by this channel's measure)."""
    return split_text(text, limit, measure)


def growing(text: str, measure: Callable[[str], int] = measure) -> str:
    """What a reply still being written shows: its first part (which the message becomes),
    held to half an event, since an edit carries its text twice. Each character of the text is
    at least a byte of the event, so no more of it than that is ever measured: the work of an
    edit stays the same however long the reply grows."""
    return split(text[:GROWN_LIMIT], GROWN_LIMIT, measure)[0]


def txn_id(home: str, seq: int | None, part: int) -> str | None:
    """The same transaction id whenever the same part of a stored message's reply is sent (a
    streamed reply's growing message is its part 0), so the homeserver keeps one event however
    often a restart sends it again. `home` is this inbox's own mark: a new home numbers its
    messages from 1 again, and must not match what an old one sent from the same device.
    None (the client makes one) for what no inbox row keeps."""
    return None if seq is None else f"nanomem-{home}-{seq}-{part}"
