"""The feature seam: what a feature adds to the turn engine, and the core it is built from.

A feature (a folder under nanomem/features/) contributes some of: tools, slash commands, a
system-prompt section, hooks around a turn and before /new, inbox channels it stores messages
under, blocks of GET /health, and background work, which may tell the owner things through the
outlet it is given. Its `feature.py` builds it from the `Core`; the composition root
(nanomem/app.py) builds the core, then adds each configured feature in one line. The core
never imports a feature: it knows them only through this base class. docs/features.md says how
to write one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from loguru import logger

from nanomem.agent.channel import DeliveryLater
from nanomem.tools import Tool, ToolContext

if TYPE_CHECKING:
    from nanomem.agent.bus import InboundMessage, MessageBus
    from nanomem.agent.commands import Command
    from nanomem.agent.context import ContextBuilder
    from nanomem.agent.loop import AgentLoop
    from nanomem.agent.outbound import Text
    from nanomem.agent.retries import Readmit
    from nanomem.agent.templates import Templates
    from nanomem.config import LLMSettings, Settings
    from nanomem.home import Home
    from nanomem.memory import Budget, GitStore, HistoryStore, Session, SessionStore
    from nanomem.providers import AfterCall, ModelCall, Provider
    from nanomem.tools import ToolRegistry

# (session, sender id) → would that chat's channel answer this sender there now? Background
# work speaking for someone (a schedule firing) asks first: a person removed from a channel's
# allow-list stops receiving what they set up before.
Admits = Callable[[str, str], bool]

# The owner outlet: delivers a notice to the owner's private chat, through whichever channel
# reaches the owner now (its buttons become text where there are none). Returns once it is
# delivered; raises DeliveryLater when it cannot be now (OwnerAway: no channel reaches them).
# What to say, and when, is the caller's; a notice merely queued could be lost unseen.
TellOwner = Callable[["Text"], Awaitable[None]]


class OwnerAway(DeliveryLater):
    """No channel reaches the owner right now (none declares it, or the owner is not there)."""


async def keep_telling(check_s: float, what: str, tell: Callable[[], Awaitable[None]]) -> None:
    """Forever, every `check_s`: `tell` the owner of `what` (it says nothing when there is
    nothing new). What cannot be told now, or fails (a full disk), is told at a later check."""
    while True:
        await asyncio.sleep(check_s)
        try:
            await tell()
        except OwnerAway:
            pass  # nobody to tell now
        except DeliveryLater as exc:  # logged by the channel
            logger.info("the owner will be told of {} later ({})", what, exc)
        except Exception:
            logger.exception("could not tell the owner of {}", what)


def anyone(session: str, sender: str) -> bool:
    return True


@dataclass(frozen=True)
class Reach:
    """Whom a feature's background work may reach, given by what runs it (the gateway; in
    `nanomem chat`, nobody beyond the terminal's own replies)."""

    pushing: Set[str] = frozenset()  # channels that take a message nobody asked for
    admits: Admits = anyone  # see Admits
    owner: TellOwner | None = None  # the owner outlet; None: no channel reaches the owner


@dataclass(frozen=True)
class MediaText:
    """What a feature made of a message's files (a voice note's transcript): added to the
    person's words and stored with them, like a document's text."""

    text: str
    preface: str = ""  # a line the reply starts with ("heard: ..."), or none

    def into(self, user: dict[str, Any]) -> dict[str, Any]:
        """The stored user message with this text added (and its preface kept for the reply:
        on a retry too); what a failed reading had left there for /retry is dropped. A re-read
        one keeps the inbox id (`in`): a replay finds this, the latest copy."""
        kept = {k: v for k, v in user.items() if k not in ("unread", "lengths", "preface")}
        made = {**kept, "content": "\n\n".join(filter(None, [user["content"], self.text]))}
        return {**made, "preface": self.preface} if self.preface else made


# A feature's reading of a message's files (a voice note's transcript); Feature.read_media.
ReadMedia = Callable[["InboundMessage"], Awaitable["MediaText | None"]]


async def read_media(hooks: list[ReadMedia], msg: InboundMessage) -> MediaText:
    """What the features make of the message's files, together; Unreadable from any."""
    if not msg.media or not hooks:
        return MediaText("")
    found = [read for hook in hooks if (read := await hook(msg)) is not None]
    return MediaText(
        "\n\n".join(r.text for r in found if r.text),
        "\n".join(r.preface for r in found if r.preface),
    )


class Unreadable(Exception):
    """A message's files cannot reach the model now (voice off, an endpoint down): `line`
    answers the person, the message is kept, and /retry reads its files again."""

    def __init__(self, line: str) -> None:
        super().__init__(line)
        self.line = line


@dataclass(frozen=True)
class HealthReport:
    """A feature's block of GET /health."""

    body: Any  # JSON-ready; None shows as null (not running)
    # Wrong in a way only a person can mend (a bad hand-written entry): the status says
    # "warning" but stays 200, since a restart (what a 503 asks a supervisor for) cannot help.
    warning: bool = False


class Feature:
    """What a feature may contribute. Subclass it (`Core.add` refuses anything else), set
    `name`, and override only what it uses: each default contributes nothing."""

    name: str = ""  # for the log and errors: "schedules", "dream", ...

    def tools(self) -> list[Tool]:
        """Tools the model may call (a parameter typed ToolContext receives the call's)."""
        return []

    def commands(self) -> list[Command]:
        """Slash commands, answered before the model sees a message."""
        return []

    def prompt_section(self) -> str | None:
        """The name of a template (templates/) added to the system prompt, rendered with the
        prompt's own variables (`shared_room`, `tools`, ...); None: nothing to add."""
        return None

    async def before_turn(self, session: Session, context: ToolContext) -> None:
        """Awaited once the turn's message is saved and its prompt's size is known."""
        return None

    async def read_media(self, msg: InboundMessage) -> MediaText | None:
        """Awaited while the message is saved, when it carries files (`msg.media`, relative
        to the workspace): their text for the model, None when none is this feature's; raise
        Unreadable when the turn must not run without them."""
        return None

    async def after_turn(self, session: Session, context: ToolContext) -> None:
        """Run in the background after the turn's reply."""
        return None

    async def before_new(self, session: Session, context: ToolContext) -> str | None:
        """Awaited by /new before the session starts afresh; a line for its reply, or None."""
        return None

    async def after_call(self, call: ModelCall) -> None:
        """Awaited after every answered model call of any model client the app built (a turn's,
        the Consolidator's, Dream's), with its usage and whom it is charged to; keep it short:
        the turn waits for it."""
        return None

    def inbox_channels(self) -> Mapping[str, Readmit]:
        """The inbox names this feature stores messages under, each with what hands a stored
        one in again when its retry is due (agent/retries.py)."""
        return {}

    def health(self) -> Mapping[str, HealthReport]:
        """Blocks for GET /health, by their key in its body (`schedules`); asked at every
        request, so cheap (a small file read at most)."""
        return {}

    async def start(self, reach: Reach) -> None:
        """Start background work, reaching at most what `reach` allows."""
        return None

    async def stop(self, grace_s: float) -> None:
        """Stop background work; what is under way may finish within `grace_s`."""
        return None


F = TypeVar("F", bound=Feature)


def _defines(feature: Feature, hook: str) -> bool:
    """Whether the feature supplies this hook instead of the empty default: looked up on the
    feature itself, so a hook set on the instance counts as much as an overriding method."""
    found = getattr(feature, hook)
    return getattr(found, "__func__", found) is not getattr(Feature, hook)


@dataclass
class Core:
    """The turn engine and its stores, built once by the composition root and handed to every
    feature's builder; it also keeps the features added to it."""

    settings: Settings
    home: Home
    workspace: Path
    bus: MessageBus
    provider: Provider
    sessions: SessionStore
    templates: Templates
    tools: ToolRegistry
    context: ContextBuilder
    loop: AgentLoop
    history: HistoryStore
    budget: Budget
    git: GitStore
    config: Path | None  # the config file in use when it is not the home's
    model: Callable[[LLMSettings], Provider]  # another model client, closed with the app's
    features: list[Feature] = field(default_factory=list)
    # Told of every answered call of the app's model clients (providers/metered.py).
    after_call: list[AfterCall] = field(default_factory=list)

    def add(self, feature: Feature | None) -> None:
        """Plug a feature into the engine (None: not configured, nothing to add). TypeError
        for one that does not subclass Feature: its parts would be missed, not refused."""
        if feature is None:
            return
        if not isinstance(feature, Feature):
            raise TypeError(
                f"{type(feature).__name__} is not a Feature: subclass nanomem.agent.Feature"
            )
        if not feature.name:
            raise TypeError(f"{type(feature).__name__} has no name: set its `name`")
        self.features.append(feature)
        for tool in feature.tools():
            self.tools.add(tool)
        self.context.tool_names = self.tools.names
        # Asked for at the first command: Dream's need its machinery, which a turn of text
        # does not load (issue 30 #7).
        self.loop.commands.register_later(feature.commands)
        section = feature.prompt_section()
        # Features may share a section (the web and MCP both bring outside text): once is enough.
        if section is not None and section not in self.context.sections:
            self.context.sections.append(section)
        # Only the hooks it supplies: an after-turn hook costs a task per turn.
        if _defines(feature, "before_turn"):
            self.loop.before_turn.append(feature.before_turn)
        if _defines(feature, "read_media"):
            self.loop.read_media.append(feature.read_media)
        if _defines(feature, "after_turn"):
            self.loop.after_turn.append(feature.after_turn)
        if _defines(feature, "before_new"):
            self.loop.before_new.append(feature.before_new)
        if _defines(feature, "after_call"):
            self.after_call.append(feature.after_call)

    def feature(self, kind: type[F]) -> F:
        """The added feature of this type; LookupError when it is not configured."""
        for feature in self.features:
            if isinstance(feature, kind):
                return feature
        raise LookupError(f"{kind.__name__} is not configured")

    def inbox_channels(self) -> dict[str, Readmit]:
        """Every feature's inbox names, each with what hands its stored messages in again."""
        return {name: again for f in self.features for name, again in f.inbox_channels().items()}

    def health(self) -> dict[str, HealthReport]:
        """Every feature's blocks of GET /health, by key. One that fails to report is logged
        and shown as an error block under its name (a warning), never a failed /health."""
        blocks: dict[str, HealthReport] = {}
        for feature in self.features:
            try:
                reports = dict(feature.health())
            except Exception:
                logger.exception("{} could not report its health", feature.name)
                reports = {feature.name: HealthReport({"error": "see the log"}, warning=True)}
            for key, report in reports.items():
                if key in blocks:  # a mistake in a feature: never a failed /health
                    logger.error("{}: the health key {!r} is taken", feature.name, key)
                else:
                    blocks[key] = report
        return blocks

    async def start_features(self, reach: Reach | None = None) -> None:
        """Start every feature's background work, reaching what `reach` allows (by default
        nobody: `nanomem chat`); one that fails is logged, the rest run."""
        for feature in self.features:
            try:
                await feature.start(reach or Reach())
            except Exception:  # the chats still work; the log says why this does not
                logger.exception("{} could not start", feature.name)

    async def stop_features(self, grace_s: float) -> None:
        """Stop them all at once, each within `grace_s`."""
        stopping = [feature.stop(grace_s) for feature in self.features]
        for feature, result in zip(
            self.features, await asyncio.gather(*stopping, return_exceptions=True), strict=True
        ):
            if isinstance(result, Exception):
                logger.opt(exception=result).error("{} did not stop cleanly", feature.name)
