"""Recall as a feature: its index follows the history as entries are appended."""

from __future__ import annotations

from nanomem.agent import Core
from nanomem.features.recall.recall import Recall


def build(core: Core) -> Recall:
    recall = Recall(
        core.history,
        core.home.history_index,
        core.settings.agent.timezone,
        time_limit_s=core.settings.memory.search_time_limit_s,
    )
    core.history.after_append.append(recall.sync_quietly)
    return recall
