"""What is remembered and how it is kept.

Sessions (one JSONL file per chat), the append-only history, token accounting and the git store
that versions SOUL.md, USER.md and memory/MEMORY.md.
"""

from typing import TYPE_CHECKING

from nanomem.exports import lazy_exports

if TYPE_CHECKING:
    from nanomem.memory.edits import EditConflict, digest, save_edit, shown
    from nanomem.memory.gitstore import (
        TRACKED,
        Files,
        GitStore,
        GitStoreError,
        Restored,
        Version,
        describe_stats,
    )
    from nanomem.memory.history import HistoryEntry, HistoryStore, NewEntry, clean_temp_files
    from nanomem.memory.session import Session, SessionStore, session_filename, to_wire
    from nanomem.memory.tokens import BpeTokenizer, Budget, Calibration

__all__ = [
    "TRACKED",
    "BpeTokenizer",
    "Budget",
    "Calibration",
    "EditConflict",
    "Files",
    "GitStore",
    "GitStoreError",
    "HistoryEntry",
    "HistoryStore",
    "NewEntry",
    "Restored",
    "Session",
    "SessionStore",
    "Version",
    "clean_temp_files",
    "describe_stats",
    "digest",
    "save_edit",
    "session_filename",
    "shown",
    "to_wire",
]
__getattr__ = lazy_exports(
    __name__,
    {
        "edits": ("EditConflict", "digest", "save_edit", "shown"),
        "gitstore": (
            "Files",
            "GitStore",
            "GitStoreError",
            "Restored",
            "TRACKED",
            "Version",
            "describe_stats",
        ),
        "history": ("HistoryEntry", "HistoryStore", "NewEntry", "clean_temp_files"),
        "session": ("Session", "SessionStore", "session_filename", "to_wire"),
        "tokens": ("BpeTokenizer", "Budget", "Calibration"),
    },
)
