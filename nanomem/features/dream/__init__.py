"""Dream: new history entries become surgical edits of SOUL.md, USER.md and memory/MEMORY.md,
each a commit; its scheduler, review, /why and the memory commands that show and undo it.
"""

from typing import TYPE_CHECKING

from nanomem.exports import lazy_exports

if TYPE_CHECKING:
    from nanomem.features.dream.commands import DREAM_IS_RUNNING, SHELL, MemoryCommands
    from nanomem.features.dream.dream import Dream, DreamBusy, DreamResult
    from nanomem.features.dream.feature import Dreaming, build
    from nanomem.features.dream.provenance import Provenance, Why, meaningful
    from nanomem.features.dream.review import PendingChange, ReviewError
    from nanomem.features.dream.review_commands import BUSY, ReviewCommands
    from nanomem.features.dream.scheduler import DreamScheduler

__all__ = [
    "BUSY",
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
    "ReviewCommands",
    "ReviewError",
    "Why",
    "build",
    "meaningful",
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
        "provenance": ("Provenance", "Why", "meaningful"),
        "review": ("PendingChange", "ReviewError"),
        "review_commands": ("BUSY", "ReviewCommands"),
        "scheduler": ("DreamScheduler",),
    },
)
