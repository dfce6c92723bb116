"""Who rewrites memory: the Consolidator and Dream.

The Consolidator archives a session's oldest turns into history; Dream turns new history into
surgical edits of the memory files, each a commit; the scheduler runs Dream, the memory
commands show and undo what it did. They sit above the agent: they run the same ReAct loop
and templates.
"""

from typing import TYPE_CHECKING

from nanomem.exports import lazy_exports

if TYPE_CHECKING:
    from nanomem.curation.commands import DREAM_IS_RUNNING, SHELL, MemoryCommands
    from nanomem.curation.consolidator import Consolidator
    from nanomem.curation.dream import Dream, DreamBusy, DreamResult
    from nanomem.curation.provenance import Provenance
    from nanomem.curation.review import PendingChange
    from nanomem.curation.scheduler import DreamScheduler

__all__ = [
    "DREAM_IS_RUNNING",
    "SHELL",
    "Consolidator",
    "Dream",
    "DreamBusy",
    "DreamResult",
    "DreamScheduler",
    "MemoryCommands",
    "PendingChange",
    "Provenance",
]
__getattr__ = lazy_exports(
    __name__,
    {
        "commands": ("DREAM_IS_RUNNING", "MemoryCommands", "SHELL"),
        "consolidator": ("Consolidator",),
        "dream": ("Dream", "DreamBusy", "DreamResult"),
        "provenance": ("Provenance",),
        "review": ("PendingChange",),
        "scheduler": ("DreamScheduler",),
    },
)
