"""The Consolidator as a feature: built from the core's sessions, history and model."""

from __future__ import annotations

from nanomem.agent import Core
from nanomem.features.consolidation.consolidator import Consolidator


def build(core: Core) -> Consolidator:
    memory = core.settings.memory
    return Consolidator(
        sessions=core.sessions,
        history=core.history,
        provider=core.provider,
        context=core.context,
        templates=core.templates,
        budget=core.budget,
        tools=core.tools,
        keep_recent_turns=memory.keep_recent_turns,
        max_rounds=memory.max_rounds,
    )
