"""Ranked recall over all history: the `search_history` tool and its index."""

from typing import TYPE_CHECKING

from nanomem.exports import lazy_exports

if TYPE_CHECKING:
    from nanomem.features.recall.feature import build
    from nanomem.features.recall.recall import Recall

__all__ = [
    "Recall",
    "build",
]
__getattr__ = lazy_exports(
    __name__,
    {
        "feature": ("build",),
        "recall": ("Recall",),
    },
)
