"""A memory file edited by the person as a whole (the web app's Memory page): one version of
kind `edit` with the summary they typed, refused when the file changed since they began.

Blocking (dulwich and file I/O): call through to_thread. The write holds the home's memory lock
as every writer of the memory files does; the file is written before the commit, as a restore
writes, so a kill in between leaves the new text, which the next writer keeps as a manual edit.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from nanomem.memory.gitstore import GitStore, GitStoreError, Version

EDIT = "edit"
# The file tools' own bound: edit_file refuses a file over 2 MB (tools/files.py MAX_READ_BYTES).
MAX_EDIT_BYTES = 2_000_000
MAX_SUMMARY_CHARS = 200
LOOKED_BACK = 200  # versions searched for the ones that changed a file since an edit began


class EditConflict(GitStoreError):
    """The file changed since the edit began (Dream, a restore, another tab, the assistant)."""

    def __init__(self, rel: str, changes: list[Version]) -> None:
        self.rel, self.changes = rel, changes
        by = "; ".join(f"{v.summary} ({v.short})" for v in changes) or "an edit not saved yet"
        super().__init__(f"{rel} changed since you began editing it (by {by}); nothing was saved")


@dataclass(frozen=True)
class Shown:
    """The memory files as a page shows them, and what an edit of them starts from."""

    files: dict[str, bytes | None]
    head: str | None  # the newest version
    digests: dict[str, str] = field(default_factory=dict)  # path → digest of its shown bytes


def digest(content: bytes | None) -> str:
    return hashlib.sha256(b"\0absent" if content is None else content).hexdigest()[:32]


def shown(git: GitStore) -> Shown:
    """The live files (read as the file tools read: a planted link is a GitStoreError)."""
    git.ensure()
    files = git.read_workspace()
    return Shown(files, git.head_sha(), {rel: digest(c) for rel, c in files.items()})


def check_summary(summary: str) -> str:
    """One line of words; GitStoreError when empty or too long."""
    line = " ".join(summary.split())
    if not line:
        raise GitStoreError("say in a few words what you changed: the summary is empty")
    if len(line) > MAX_SUMMARY_CHARS:
        raise GitStoreError(f"the summary is longer than {MAX_SUMMARY_CHARS} characters")
    return line


def save_edit(git: GitStore, rel: str, text: str, summary: str, base: str, seen: str) -> Version:
    """Save `text` as `rel`, one version titled `edit: <summary>`. `base` is the newest version
    and `seen` the file's digest when the edit began: a change since is an EditConflict."""
    if rel not in git.tracked:
        raise GitStoreError(f"{rel!r} is not a memory file")
    title = check_summary(summary)
    data = text.replace("\r\n", "\n").encode("utf-8")  # a browser's textarea sends CRLF
    if len(data) > MAX_EDIT_BYTES:
        raise GitStoreError(
            f"{rel} would be {len(data):,} bytes; memory files stay under {MAX_EDIT_BYTES:,}"
        )
    with git.writing():
        git.ensure()
        live = git.read_workspace()
        if digest(live[rel]) != seen:
            raise EditConflict(rel, _changes_since(git, base, rel))
        if live[rel] == data:
            raise GitStoreError(f"{rel} is unchanged; nothing was saved")
        git.commit_manual_edits()  # changes not yet versioned keep a version of their own
        git.write_files({rel: data})
        version = git.commit_files(live | {rel: data}, EDIT, title=title)
    assert version is not None  # the file differs from the newest version: checked above
    return version


def _changes_since(git: GitStore, base: str, rel: str) -> list[Version]:
    """The versions after `base` that changed `rel`, oldest first."""
    found = []
    for version in git.log(limit=LOOKED_BACK):
        if version.sha == base:
            break
        if rel in version.files:
            found.append(version)
    return found[::-1]
