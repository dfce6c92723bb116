"""Reminders and scheduled turns as a feature: the store under the home, turns on the bus."""

from __future__ import annotations

from nanomem.agent import Core
from nanomem.features.schedules.store import ScheduleStore
from nanomem.features.schedules.turns import ScheduledTurns


def build(core: Core) -> ScheduledTurns:
    settings = core.settings
    store = ScheduleStore.of(core.home, settings.schedule)
    return ScheduledTurns(
        store, core.bus, core.templates, settings.schedule, settings.agent.timezone, core.home
    )
