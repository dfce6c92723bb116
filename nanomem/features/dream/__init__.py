"""Dream: new history entries become surgical edits of SOUL.md, USER.md and memory/MEMORY.md,
each a commit; its scheduler, review, /why and the memory commands that show and undo it.
"""

from typing import TYPE_CHECKING

from nanomem.exports import lazy_exports

if TYPE_CHECKING:
    from nanomem.features.dream.commands import DREAM_IS_RUNNING, SHELL, MemoryCommands
    from nanomem.features.dream.dream import Dream, DreamBusy, DreamResult
    from nanomem.features.dream.feature import Dreaming, build
    from nanomem.features.dream.provenance import Provenance
    from nanomem.features.dream.review import PendingChange
    from nanomem.features.dream.scheduler import DreamScheduler

__all__ = [
    "DREAM_IS_RUNNING",
    "SHELL",
    "Dream",
    "DreamBusy",
    "DreamResult",
    "DreamScheduler",
    "Dreaming",
    "MemoryCommands",
    "PendingChange",
    "Provenance",
    "build",
]
__getattr__ = lazy_exports(
    __name__,
    {
        "commands": (
            "DREAM_IS_RUNNING",
            "SHELL",
            "MemoryCommands",
        ),
        "dream": (
            "Dream",
            "DreamBusy",
            "DreamResult",
        ),
        "feature": ("Dreaming", "build"),
        "provenance": ("Provenance",),
        "review": ("PendingChange",),
        "scheduler": ("DreamScheduler",),
    },
)
