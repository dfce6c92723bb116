"""Background tasks: `spawn` hands a long job to a turn of its own; its chat is told the result."""

from typing import TYPE_CHECKING

from nanomem.exports import lazy_exports

if TYPE_CHECKING:
    from nanomem.features.tasks.background import INBOX_CHANNEL, BackgroundTasks
    from nanomem.features.tasks.feature import build
    from nanomem.features.tasks.records import TaskRecord, TaskStore
    from nanomem.features.tasks.report import age, cost, in_order, report, state_of

__all__ = [
    "INBOX_CHANNEL",
    "BackgroundTasks",
    "TaskRecord",
    "TaskStore",
    "age",
    "build",
    "cost",
    "in_order",
    "report",
    "state_of",
]
__getattr__ = lazy_exports(
    __name__,
    {
        "background": ("INBOX_CHANNEL", "BackgroundTasks"),
        "feature": ("build",),
        "records": ("TaskRecord", "TaskStore"),
        "report": ("age", "cost", "in_order", "report", "state_of"),
    },
)
