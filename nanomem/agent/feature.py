"""The feature seam: what a feature adds to the turn engine, and the core it is built from.

A feature (a folder under nanomem/features/) contributes some of: tools, slash commands, a
system-prompt section, hooks around a turn and before /new, inbox channels it stores messages
under, and background work. Its `feature.py` builds it from the `Core`; the composition root
(nanomem/app.py) builds the core, then adds each configured feature in one line. The core
never imports a feature: it knows them only through this protocol. docs/features.md says how
to write one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from loguru import logger

from nanomem.tools import Tool, ToolContext

if TYPE_CHECKING:
    from nanomem.agent.bus import MessageBus
    from nanomem.agent.commands import Command
    from nanomem.agent.context import ContextBuilder
    from nanomem.agent.loop import AgentLoop
    from nanomem.agent.retries import Readmit
    from nanomem.agent.templates import Templates
    from nanomem.config import LLMSettings, Settings
    from nanomem.home import Home
    from nanomem.memory import Budget, GitStore, HistoryStore, Session, SessionStore
    from nanomem.providers import Provider
    from nanomem.tools import ToolRegistry

# (session, sender id) → would that chat's channel answer this sender there now? Background
# work speaking for someone (a schedule firing) asks first: a person removed from a channel's
# allow-list stops receiving what they set up before.
Admits = Callable[[str, str], bool]


def anyone(session: str, sender: str) -> bool:
    return True


class Feature(Protocol):
    """What a feature may contribute; subclass it and override only what it uses (each
    default contributes nothing)."""

    name: str  # for the log: "schedules", "dream", ...

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

    async def after_turn(self, session: Session, context: ToolContext) -> None:
        """Run in the background after the turn's reply."""
        return None

    async def before_new(self, session: Session, context: ToolContext) -> str | None:
        """Awaited by /new before the session starts afresh; a line for its reply, or None."""
        return None

    def inbox_channels(self) -> Mapping[str, Readmit]:
        """The inbox names this feature stores messages under, each with what hands a stored
        one in again when its retry is due (agent/retries.py)."""
        return {}

    async def start(self, pushing: set[str], admits: Admits) -> None:
        """Start background work. `pushing`: the channels that take a message nobody asked
        for (the gateway's; none in `nanomem chat`); `admits`: see Admits."""
        return None

    async def stop(self, grace_s: float) -> None:
        """Stop background work; what is under way may finish within `grace_s`."""
        return None


F = TypeVar("F", bound=Feature)


def _defines(feature: Feature, hook: str) -> bool:
    """Whether the feature's class overrides a hook, rather than keeping the empty default."""
    return getattr(type(feature), hook) is not getattr(Feature, hook)


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

    def add(self, feature: Feature | None) -> None:
        """Plug a feature into the engine (None: not configured, nothing to add)."""
        if feature is None:
            return
        self.features.append(feature)
        for tool in feature.tools():
            self.tools.add(tool)
        self.context.tool_names = self.tools.names
        for command in feature.commands():
            self.loop.commands.register(command)
        if (section := feature.prompt_section()) is not None:
            self.context.sections.append(section)
        # Only the hooks it defines: an after-turn hook costs a task per turn.
        if _defines(feature, "before_turn"):
            self.loop.before_turn.append(feature.before_turn)
        if _defines(feature, "after_turn"):
            self.loop.after_turn.append(feature.after_turn)
        if _defines(feature, "before_new"):
            self.loop.before_new.append(feature.before_new)

    def feature(self, kind: type[F]) -> F:
        """The added feature of this type; LookupError when it is not configured."""
        for feature in self.features:
            if isinstance(feature, kind):
                return feature
        raise LookupError(f"{kind.__name__} is not configured")

    def inbox_channels(self) -> dict[str, Readmit]:
        """Every feature's inbox names, each with what hands its stored messages in again."""
        return {name: again for f in self.features for name, again in f.inbox_channels().items()}

    async def start_features(
        self, pushing: set[str] | None = None, admits: Admits = anyone
    ) -> None:
        """Start every feature's background work; one that fails is logged, the rest run."""
        for feature in self.features:
            try:
                await feature.start(set(pushing or ()), admits)
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
