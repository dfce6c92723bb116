"""What an incoming Slack payload is, free of slack-bolt: an event, a slash command or a
button press read into one `Incoming`, with its chat key and the keys that tell a re-sent
copy from a new message. Everything here reads untrusted JSON: every field is checked for its
type and bounded in length."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from nanomem.agent import parse_command
from nanomem.audience import Sender

Kind = Literal["event", "command", "press"]
TEXT_LIMIT = 40_000  # Slack's own limit on a message's text: nothing longer is real
FILES_LIMIT = 10  # Slack attaches at most 10 files to one message
# Message subtypes a person's new words come with; edits, deletions, joins and bots' posts
# (message_changed, message_deleted, channel_join, bot_message, ...) are not for the model.
_NEW_WORDS = (None, "file_share", "thread_broadcast")
_ID = re.compile(r"[A-Z0-9]{2,40}")
_TS = re.compile(r"[0-9]{1,12}\.[0-9]{1,8}")
REFUSED_PRESS = "Only the people this app serves can use its buttons."
COMMAND = "/nanomem"  # the one slash command the app registers (docs/slack.md)


@dataclass(frozen=True)
class Incoming:
    """A message, command or press we answer: where it belongs and who sent it."""

    kind: Kind
    channel: str  # the conversation (C…, G…, D…)
    thread: str | None  # the thread it belongs to: its own session
    user: str
    text: str
    shared: bool  # a channel or group DM, from the conversation's type
    keys: tuple[str, ...]  # what a re-sent copy of it shares with it (event_id, channel:ts)
    files: tuple[dict[str, Any], ...] = ()
    pressed_ts: str = ""  # a press: the message whose button it was
    pressed_text: str = ""  # ... and its text (mrkdwn), kept when its buttons go
    name: str = ""  # how Slack shows them (a message's user_profile), for the model in a room
    sender: Sender = field(default_factory=Sender)
    seq: int | None = None
    replayed: bool = False
    retry: bool = False

    @property
    def chat(self) -> str:
        """`<channel>`, or `<channel>:<thread_ts>`: a thread is a session of its own."""
        return self.channel if self.thread is None else f"{self.channel}:{self.thread}"


def target(chat: str) -> tuple[str, str | None]:
    """(channel, thread_ts) of a chat key."""
    channel, _, thread = chat.partition(":")
    return channel, thread or None


def _id(value: Any) -> str:
    return value if isinstance(value, str) and _ID.fullmatch(value) else ""


def _ts(value: Any) -> str | None:
    return value if isinstance(value, str) and _TS.fullmatch(value) else None


def _text(value: Any) -> str:
    return value[:TEXT_LIMIT] if isinstance(value, str) else ""


def shared_from_type(channel_type: Any) -> bool | None:
    """A conversation's type, as a message event names it: a DM is private, anything with more
    people (a channel, a private channel, a group DM) is shared; None when it does not say."""
    if channel_type == "im":
        return False
    if channel_type in ("channel", "group", "mpim"):
        return True
    return None


def shared_from_info(info: dict[str, Any]) -> bool:
    """From conversations.info: only a DM is private."""
    return not bool(info.get("is_im"))


def read_event(body: dict[str, Any], bot_user: str) -> Incoming | None:
    """A person's new message (`message` or `app_mention`); None for edits, deletions, bots'
    posts (ours too) and anything that is not a message. `shared` is left False when the
    event does not name its conversation's type: the caller asks Slack."""
    event = body.get("event")
    if not isinstance(event, dict) or event.get("type") not in ("message", "app_mention"):
        return None
    if event.get("subtype") not in _NEW_WORDS or event.get("bot_id") or event.get("bot_profile"):
        return None
    channel, user, ts = _id(event.get("channel")), _id(event.get("user")), _ts(event.get("ts"))
    if not channel or not user or ts is None or user == bot_user:
        return None
    raw_files = event.get("files")
    files = (
        tuple(f for f in raw_files[:FILES_LIMIT] if isinstance(f, dict))
        if isinstance(raw_files, list)
        else ()
    )
    event_id = body.get("event_id")
    keys = (f"{channel}:{ts}",) + ((str(event_id)[:64],) if isinstance(event_id, str) else ())
    thread = _ts(event.get("thread_ts"))
    shared = shared_from_type(event.get("channel_type"))
    text = _text(event.get("text"))
    return Incoming(
        "event", channel, thread, user, text, bool(shared), keys, files, name=_name(event)
    )


def _name(event: dict[str, Any]) -> str:
    """The display name a message's `user_profile` carries (Slack adds it to people's posts)."""
    profile = event.get("user_profile")
    if not isinstance(profile, dict):
        return ""
    for key in ("display_name", "real_name", "name"):
        if isinstance(found := profile.get(key), str) and found.strip():
            return " ".join(found.split())[:80]
    return ""


def names_type(body: dict[str, Any]) -> bool:
    event = body.get("event")
    return isinstance(event, dict) and shared_from_type(event.get("channel_type")) is not None


def is_mention(body: dict[str, Any]) -> bool:
    event = body.get("event")
    return isinstance(event, dict) and event.get("type") == "app_mention"


def read_command(body: dict[str, Any]) -> Incoming | None:
    """`/nanomem help` → `/help`; a bare `/nanomem` asks for the help."""
    channel, user = _id(body.get("channel_id")), _id(body.get("user_id"))
    trigger = body.get("trigger_id")
    if not channel or not user or not isinstance(trigger, str):
        return None
    words = _text(body.get("text")).strip().lstrip("/")
    text = f"/{words}" if words else "/help"
    if parse_command(text) is None:
        return None
    return Incoming("command", channel, None, user, text, False, (f"trigger:{trigger[:80]}",))


def read_press(body: dict[str, Any]) -> Incoming | None:
    """A press of one of our buttons: what it sends, as if the presser typed it. A value that
    is not a command was made by no button of ours (it would reach the model as their words)."""
    if body.get("type") != "block_actions":
        return None
    user = body.get("user")
    container = body.get("container")
    actions = body.get("actions")
    trigger = body.get("trigger_id")
    if not isinstance(user, dict) or not isinstance(container, dict):
        return None
    if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
        return None
    channel, presser = _id(container.get("channel_id")), _id(user.get("id"))
    pressed = _ts(container.get("message_ts"))
    if not channel or not presser or pressed is None or not isinstance(trigger, str):
        return None
    value = _text(actions[0].get("value"))[:2000]
    keys = (f"trigger:{trigger[:80]}",)
    thread = _ts(container.get("thread_ts"))
    message = body.get("message")
    shown = _text(message.get("text"))[:2900] if isinstance(message, dict) else ""
    return Incoming(
        "press", channel, thread, presser, value, False, keys, pressed_ts=pressed,
        pressed_text=shown,
    )  # fmt: skip


def fair_press(found: Incoming) -> bool:
    return parse_command(found.text) is not None


def addressed(text: str, bot_user: str) -> bool:
    """In a channel: an @mention of the app (`<@UBOT>` in the text Slack sends)."""
    return bool(bot_user) and f"<@{bot_user}>" in text


def without_mention(text: str, bot_user: str) -> str:
    """The words without the app's own mention (`<@UBOT>` or `<@UBOT|name>`)."""
    if not bot_user:
        return text.strip()
    return re.sub(rf"<@{re.escape(bot_user)}(\|[^>]*)?>", "", text).strip()


def file_label(file: dict[str, Any]) -> str:
    name = file.get("name")
    return f"[file: {name[:200]}]" if isinstance(name, str) and name else "[file]"


_FILE_FIELDS = ("id", "name", "size", "url_private", "url_private_download")


def stored_form(found: Incoming) -> dict[str, Any]:
    """What the inbox keeps of it: the fields read, bounded, never the whole (untrusted) body."""
    files = [
        {k: f[k] for k in _FILE_FIELDS if isinstance(f.get(k), str | int)} for f in found.files
    ]
    for file in files:
        for key, value in file.items():
            if isinstance(value, str):
                file[key] = value[:2048]
    return {
        "version": 1,
        "kind": found.kind,
        "channel": found.channel,
        "thread": found.thread,
        "user": found.user,
        "text": found.text,
        "shared": found.shared,
        "keys": list(found.keys),
        "files": files,
        "pressed_ts": found.pressed_ts,
        "pressed_text": found.pressed_text,
        "name": found.name,
    }


def from_stored(payload: dict[str, Any]) -> Incoming | None:
    """An `Incoming` again, from what `stored_form` kept (None for anything else)."""
    kind, channel, user = payload.get("kind"), _id(payload.get("channel")), _id(payload.get("user"))
    if kind not in ("event", "command", "press") or not channel or not user:
        return None
    files = payload.get("files")
    keys = payload.get("keys")
    return Incoming(
        kind,
        channel,
        _ts(payload.get("thread")),
        user,
        _text(payload.get("text")),
        bool(payload.get("shared")),
        tuple(str(k) for k in keys) if isinstance(keys, list) else (),
        tuple(f for f in files if isinstance(f, dict)) if isinstance(files, list) else (),
        _ts(payload.get("pressed_ts")) or "",
        pressed_text=_text(payload.get("pressed_text"))[:2900],
        name=_text(payload.get("name"))[:80],
    )


def in_slack_spelling(text: str, names: set[str]) -> str:
    """Our own text (a command's answer) naming commands as a person types them in Slack,
    `/nanomem stop`: Slack takes a message starting with `/stop` for a slash command of its own."""
    for name in sorted(names, key=len, reverse=True):
        text = re.sub(rf"(?<![\w/])/{re.escape(name)}\b", f"{COMMAND} {name}", text)
    return text
