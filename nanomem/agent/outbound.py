"""What the core sends a channel: one small union of typed parts in an envelope.

`Text` is a whole message (the model's reply, an error, a command's own text); `Delta` a piece
of a reply while the model writes it, `DeltaEnd` the end of a step's pieces; `Question` asks the
person to choose; `Progress` says which tool runs; `File` hands over a file; `Paused` ends an
API client's request whose turn waits for the client's own tools (agent/client_turn.py);
`TurnStarted` and `TurnEnded` mark a turn's life for a channel that shows it (typing). The
core picks the form a channel gets from its Capabilities (agent/channel.py: `shaped`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from nanomem.text import untrusted_json

if TYPE_CHECKING:
    from nanomem.agent.bus import InboundMessage
    from nanomem.providers import ToolCall
    from nanomem.tools import Outlet

# "reply": the model's words (Markdown); "error": a short plain note (something failed or was
# refused); "command": the runtime's own text, shown as written (every line break, `<id>`).
Style = Literal["reply", "error", "command"]


STOPPING = "stopping"  # an error's category: the gateway is shutting down
STOPPING_NOTE = "The gateway is stopping; please try again shortly."


@dataclass(frozen=True)
class Button:
    """A choice shown under a message; pressing it sends `command` as the presser's message
    (InboundMessage.pressed), so it is checked like anything they type. Telegram shows inline
    buttons (`command` ≤ 64 bytes), the terminal a hint line; without buttons the core adds
    them to the text."""

    label: str
    command: str


@dataclass(frozen=True)
class Text:
    text: str
    style: Style = "reply"
    buttons: tuple[Button, ...] = ()
    command: str = ""  # the command whose answer this is
    category: str = ""  # a model failure's category (auth, quota, timeout, ...)
    cut_short: bool = False  # a reply a model failure ended early: what was shown, and a note
    truncated: bool = False  # the model stopped at the turn's max_tokens (finish_reason length)


@dataclass(frozen=True)
class Delta:
    piece: str  # new since the last piece
    so_far: str  # the step's whole text so far (masked: never half a secret)
    step: int  # which model call of the turn writes it


@dataclass(frozen=True)
class DeltaEnd:
    """A step's text is complete: a tool call came after it, and a later step writes on. The
    last step's text ends with the reply itself."""

    step: int


@dataclass(frozen=True)
class Question:
    text: str
    choices: tuple[Button, ...]  # each answers as its command, like a press


@dataclass(frozen=True)
class Progress:
    line: str  # a one-line summary of a tool call
    tool: str


def describe_call(call: ToolCall, width: int = 100) -> str:
    """A one-line summary of a tool call for progress displays."""
    try:
        args = untrusted_json.loads(call.arguments or "{}")
        shown = ", ".join(f"{k}={v!r}" for k, v in args.items()) if isinstance(args, dict) else ""
    except ValueError:
        shown = call.arguments
    line = f"{call.name}({shown})".replace("\n", " ")
    return line if len(line) <= width else line[: width - 1] + "…"


@dataclass(frozen=True)
class File:
    path: str  # relative to the workspace
    caption: str = ""

    def where(self, workspace: Path | None) -> Path:
        """Where it lies, for a person at this machine: below `workspace` when known."""
        path = Path(self.path)
        return workspace / path if workspace is not None and not path.is_absolute() else path


@dataclass(frozen=True)
class Paused:
    """The turn waits for the API client's tools. `text` is what the model wrote beside the
    calls; `calls` are the client's calls only (ours have run)."""

    text: str
    calls: tuple[ToolCall, ...]


@dataclass(frozen=True)
class TurnStarted:
    """The core began on the message `reply_to` names (after the channel's `prepare`): its
    person now waits for an answer. Only for a channel with `Capabilities.turns`."""

    command: str = ""  # the command it runs ("" for a model turn)


@dataclass(frozen=True)
class TurnEnded:
    """The core is done with the message `reply_to` names; its answer, if any, went before
    this. `stopped`: /stop cut the turn short (what was shown of it stays shown)."""

    stopped: bool = False


Part = Text | Delta | DeltaEnd | Question | Progress | File | Paused | TurnStarted | TurnEnded
_TYPES: dict[str, type[Any]] = {
    "text": Text,
    "delta": Delta,
    "delta_end": DeltaEnd,
    "question": Question,
    "progress": Progress,
    "file": File,
    "paused": Paused,
    "turn_started": TurnStarted,
    "turn_ended": TurnEnded,
}


@dataclass(frozen=True)
class OutboundMessage:
    channel: str
    chat_id: str
    part: Part
    reply_to: str | None = None  # the inbound message's id
    seq: int | None = None  # the inbox message this answers: delivering it removes that

    @classmethod
    def answering(cls, msg: InboundMessage, part: Part) -> OutboundMessage:
        return cls(msg.channel, msg.chat_id, part, msg.id, msg.seq)

    @property
    def content(self) -> str:
        """The words it carries, whatever its part."""
        part = self.part
        if isinstance(part, Text | Question | Paused):
            return part.text
        if isinstance(part, Delta):
            return part.piece
        if isinstance(part, Progress):
            return part.line
        if isinstance(part, File):
            return part.caption
        return ""

    @property
    def buttons(self) -> tuple[Button, ...]:
        part = self.part
        if isinstance(part, Question):
            return part.choices
        return part.buttons if isinstance(part, Text) else ()

    @property
    def is_answer(self) -> bool:
        """A whole message (not a piece, a progress line or a question): ends what it answers."""
        return isinstance(self.part, Text | File | Paused)

    def to_dict(self) -> dict[str, Any]:
        kind = next(name for name, cls in _TYPES.items() if isinstance(self.part, cls))
        fields = dict(vars(self.part))
        for key in ("buttons", "choices"):
            if key in fields:
                fields[key] = [[b.label, b.command] for b in fields[key]]
        if "calls" in fields:
            fields["calls"] = [[c.id, c.name, c.arguments] for c in fields["calls"]]
        return {
            "version": 2,
            "channel": self.channel,
            "chat_id": self.chat_id,
            "reply_to": self.reply_to,
            "part": {"type": kind, **fields},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], seq: int) -> OutboundMessage:
        """As stored in the inbox; a reply stored before parts were (`kind`, `metadata`) too."""
        channel, chat, reply_to = data["channel"], data["chat_id"], data.get("reply_to")
        if "part" not in data:
            return cls(channel, chat, _old_text(data), reply_to, seq)
        fields = dict(data["part"])
        kind = _TYPES[str(fields.pop("type"))]
        for key in ("buttons", "choices"):
            if key in fields:
                fields[key] = _buttons(fields[key])
        if "calls" in fields:
            from nanomem.providers import ToolCall

            fields["calls"] = tuple(ToolCall(*map(str, call)) for call in fields["calls"])
        return cls(channel, chat, kind(**fields), reply_to, seq)


def file_outlet(
    msg: InboundMessage, show: Callable[[OutboundMessage], Awaitable[None]] | None
) -> Outlet | None:
    """Where `send_file` hands a file during a turn: out with the turn's pieces, in order with
    them. Not as its answer (no `seq`): the message stays in the inbox until the reply is
    delivered. None when the pieces go nowhere."""
    if show is None:
        return None
    pieces = show  # narrowed for the closure

    async def send(path: str, caption: str) -> None:
        await pieces(OutboundMessage(msg.channel, msg.chat_id, File(path, caption), msg.id))

    return send


def _buttons(pairs: Any) -> tuple[Button, ...]:
    return tuple(Button(str(label), str(command)) for label, command in pairs or [])


def _old_text(data: dict[str, Any]) -> Text:
    """A reply as version 1 stored it: content, kind ("reply" or "error"), metadata."""
    meta = data.get("metadata") or {}
    command = str(meta.get("command") or "")
    error = data.get("kind") == "error"
    style: Style = "error" if error else "command" if command else "reply"
    return Text(
        str(data["content"]),
        style,
        _buttons(data.get("buttons")),
        command,
        str(meta.get("category") or ""),
        bool(meta.get("cut_short")),
    )
