"""The Consolidator: keeps each session inside its token budget by archiving its oldest turns
into memory/history.jsonl.
"""

from typing import TYPE_CHECKING

from nanomem.exports import lazy_exports

if TYPE_CHECKING:
    from nanomem.features.consolidation.consolidator import Consolidator
    from nanomem.features.consolidation.feature import build

__all__ = [
    "Consolidator",
    "build",
]
__getattr__ = lazy_exports(
    __name__,
    {
        "consolidator": ("Consolidator",),
        "feature": ("build",),
    },
)
