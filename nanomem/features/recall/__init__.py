"""Ranked recall over all history: the `search_history` tool and its index, and the web app's
index of the chats' own messages."""

from typing import TYPE_CHECKING

from nanomem.exports import lazy_exports

if TYPE_CHECKING:
    from nanomem.features.recall.feature import build
    from nanomem.features.recall.messages import MessageHit, MessageIndex, MessagesFound
    from nanomem.features.recall.recall import Found, Recall
    from nanomem.features.recall.search_query import MAX_CHARS, marked

__all__ = [
    "MAX_CHARS",
    "Found",
    "MessageHit",
    "MessageIndex",
    "MessagesFound",
    "Recall",
    "build",
    "marked",
]
__getattr__ = lazy_exports(
    __name__,
    {
        "feature": ("build",),
        "messages": ("MessageHit", "MessageIndex", "MessagesFound"),
        "recall": ("Found", "Recall"),
        "search_query": ("MAX_CHARS", "marked"),
    },
)
