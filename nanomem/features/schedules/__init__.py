"""Reminders and scheduled turns: what a chat asked to happen later, kept and fired."""

from typing import TYPE_CHECKING

from nanomem.exports import lazy_exports

if TYPE_CHECKING:
    from nanomem.features.schedules.feature import build
    from nanomem.features.schedules.rules import Schedule, ScheduleError
    from nanomem.features.schedules.store import ScheduleStore
    from nanomem.features.schedules.turns import INBOX_CHANNEL, ScheduledTurns

__all__ = [
    "INBOX_CHANNEL",
    "Schedule",
    "ScheduleError",
    "ScheduleStore",
    "ScheduledTurns",
    "build",
]
__getattr__ = lazy_exports(
    __name__,
    {
        "feature": ("build",),
        "rules": ("Schedule", "ScheduleError"),
        "store": ("ScheduleStore",),
        "turns": (
            "INBOX_CHANNEL",
            "ScheduledTurns",
        ),
    },
)
