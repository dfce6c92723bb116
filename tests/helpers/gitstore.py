"""A GitStore that counts its blames from scratch (the costly path)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nanomem.memory.gitstore import Annotated, GitStore

if TYPE_CHECKING:
    from dulwich.objects import ObjectID
    from dulwich.repo import Repo


class FromScratch(GitStore):
    """Counts the blames that read the whole history."""

    def __init__(self, git: GitStore) -> None:
        super().__init__(git.git_dir, git.workspace, lock=git.lock)
        self.count = 0

    def _annotate_from_scratch(self, repo: Repo, start: ObjectID, path: bytes) -> Annotated:
        self.count += 1
        return super()._annotate_from_scratch(repo, start, path)
