"""Versions of SOUL.md, USER.md and memory/MEMORY.md in a bare git repository.

The repository lives outside the workspace and has no index or worktree of its own: commits
are built from the files' bytes, and restores write files back atomically. So it can never
collide with a git repository the workspace happens to sit in, and the standard `git` reads
it (`git --git-dir=<home>/memory.git log`). All of it is blocking: call through to_thread.
"""

from __future__ import annotations

import io
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, cast

from nanomem.durable import atomic_write_text

if TYPE_CHECKING:  # dulwich itself is imported on first use: not on the way to the prompt
    from dulwich.objects import ObjectID
    from dulwich.refs import Ref
    from dulwich.repo import Repo

TRACKED = ("SOUL.md", "USER.md", "memory/MEMORY.md")
BRANCH = cast("Ref", b"refs/heads/main")
HEAD = cast("Ref", b"HEAD")
IDENTITY = b"nanomem <nanomem@localhost>"
FILE_MODE = 0o100644
DIR_MODE = 0o040000

Files = dict[str, bytes | None]  # path → content, None when the file does not exist


class GitStoreError(Exception):
    """A request the person made that cannot be done (unknown sha, ...); safe to show."""


@dataclass(frozen=True)
class Version:
    sha: str
    time: datetime
    message: str
    files: dict[str, tuple[int, int]] = field(default_factory=dict)  # path → (added, removed)

    @property
    def short(self) -> str:
        return self.sha[:8]

    @property
    def summary(self) -> str:
        return self.message.splitlines()[0] if self.message else ""


@dataclass(frozen=True)
class Restored:
    version: Version  # the new commit
    undone: Version  # the change that was undone
    overwritten_later: list[Version]  # later changes to the same files, also undone


class GitStore:
    def __init__(self, git_dir: Path, workspace: Path, tracked: tuple[str, ...] = TRACKED) -> None:
        self.git_dir = git_dir
        self.workspace = workspace
        self.tracked = tracked

    # -- setup and commits ----------------------------------------------------------------

    def ensure(self) -> None:
        """Create the repository on first use, with the current files as the first version."""
        if not (self.git_dir / "HEAD").exists():
            self.git_dir.mkdir(parents=True, exist_ok=True)
            _dulwich_repo().init_bare(str(self.git_dir), default_branch=b"main").close()
        if self._head() is None:
            self._commit(self.read_workspace(), "initial memory", allow_empty=True)

    def read_workspace(self) -> Files:
        files: Files = {}
        for rel in self.tracked:
            try:
                files[rel] = (self.workspace / rel).read_bytes()
            except FileNotFoundError:
                files[rel] = None
        return files

    def commit_if_changed(self, message: str) -> Version | None:
        """Commit the workspace's tracked files if they differ from the last version."""
        self.ensure()
        current = self.read_workspace()
        if current == self.files_at(self._head()):
            return None
        return self._commit(current, message)

    def commit_manual_edits(self) -> Version | None:
        """Edits made outside Dream (by the person, or the chat agent) become their own version,
        so neither a Dream run nor a restore can silently discard them."""
        return self.commit_if_changed("manual edit")

    def _open(self) -> Repo:
        return _dulwich_repo()(str(self.git_dir))

    def _commit(self, files: Files, kind: str, *, allow_empty: bool = False) -> Version:
        """Commit `files`; the message is built from the real diff: `<kind>: <stats>` and the
        changed lines, never from anyone's claims about them."""
        with self._open() as repo:
            parent = self._head(repo)
            tree_id = self._write_tree(repo, files)
            parent_tree = repo[parent].tree if parent else None  # type: ignore[attr-defined]
            diff = self._diff_bytes(repo, parent_tree, tree_id)
            stats = _stats(diff)
            if not allow_empty and not stats:
                raise GitStoreError("nothing changed")
            from dulwich.objects import Commit

            commit = Commit()
            commit.tree = tree_id
            commit.parents = [parent] if parent else []
            commit.author = commit.committer = IDENTITY
            now = int(time.time())
            offset = time.localtime(now).tm_gmtoff
            commit.author_time = commit.commit_time = now
            commit.author_timezone = commit.commit_timezone = offset
            commit.encoding = b"UTF-8"
            commit.message = _message(kind, stats, diff).encode("utf-8")
            repo.object_store.add_object(commit)
            repo.refs[BRANCH] = commit.id
            repo.refs.set_symbolic_ref(HEAD, BRANCH)
            return self._version(repo, commit.id)

    def _write_tree(self, repo: Repo, files: Files) -> ObjectID:
        """Nested trees for paths like memory/MEMORY.md; missing files are simply absent."""
        from dulwich.objects import Blob, Tree

        nested: dict[str, Files] = {}
        root = Tree()
        for rel, content in sorted(files.items()):
            if content is None:
                continue
            head, _, rest = rel.partition("/")
            if rest:
                nested.setdefault(head, {})[rest] = content
                continue
            blob = Blob.from_string(content)
            repo.object_store.add_object(blob)
            root.add(head.encode(), FILE_MODE, blob.id)
        for folder, children in nested.items():
            root.add(folder.encode(), DIR_MODE, self._write_tree(repo, children))
        repo.object_store.add_object(root)
        return root.id

    # -- reading --------------------------------------------------------------------------

    def _head(self, repo: Repo | None = None) -> ObjectID | None:
        if repo is None:
            if not (self.git_dir / "HEAD").exists():
                return None
            with self._open() as opened:
                return self._head(opened)
        try:
            return repo.refs[BRANCH]
        except KeyError:
            return None

    def files_at(self, sha: ObjectID | None) -> Files:
        if sha is None:
            return dict.fromkeys(self.tracked)
        with self._open() as repo:
            tree = repo[repo[sha].tree]  # type: ignore[attr-defined]
            files: Files = {}
            for rel in self.tracked:
                try:
                    _, blob_id = tree.lookup_path(repo.object_store.__getitem__, rel.encode())  # type: ignore[attr-defined]
                    files[rel] = repo[blob_id].data  # type: ignore[attr-defined]
                except KeyError:
                    files[rel] = None
            return files

    def log(self, limit: int = 20) -> list[Version]:
        self.ensure()
        with self._open() as repo:
            head = self._head(repo)
            if head is None:
                return []
            return [
                self._version(repo, e.commit.id) for e in repo.get_walker([head], max_entries=limit)
            ]

    def resolve(self, prefix: str) -> str:
        """A full sha from any unique prefix of 4+ hex characters of a version in the history."""
        prefix = prefix.strip().lower()
        if not re.fullmatch(r"[0-9a-f]{4,40}", prefix):
            raise GitStoreError(f"{prefix!r} is not a version id (4 to 40 hex characters)")
        self.ensure()
        with self._open() as repo:
            head = self._head(repo)
            shas = [e.commit.id.decode() for e in repo.get_walker([head])] if head else []
        matches = [sha for sha in shas if sha.startswith(prefix)]
        if not matches:
            raise GitStoreError(f"no memory version starts with {prefix}")
        if len(matches) > 1:
            raise GitStoreError(f"{prefix} matches {len(matches)} versions; give more characters")
        return matches[0]

    def show(self, sha: str) -> tuple[Version, str]:
        """A version and its diff against its parent."""
        with self._open() as repo:
            commit = repo[sha.encode()]
            parent_tree = repo[commit.parents[0]].tree if commit.parents else None  # type: ignore[attr-defined]
            diff = self._diff_bytes(repo, parent_tree, commit.tree)  # type: ignore[attr-defined]
            return self._version(repo, commit.id), diff.decode("utf-8", errors="replace")

    def _version(self, repo: Repo, sha: ObjectID) -> Version:
        commit = repo[sha]
        parent_tree = repo[commit.parents[0]].tree if commit.parents else None  # type: ignore[attr-defined]
        stats = _stats(self._diff_bytes(repo, parent_tree, commit.tree))  # type: ignore[attr-defined]
        when = datetime.fromtimestamp(commit.commit_time).astimezone()  # type: ignore[attr-defined]
        message = commit.message.decode("utf-8", errors="replace").strip()  # type: ignore[attr-defined]
        return Version(sha.decode(), when, message, stats)

    @staticmethod
    def _diff_bytes(repo: Repo, old_tree: ObjectID | None, new_tree: ObjectID) -> bytes:
        from dulwich.patch import write_tree_diff

        buffer = io.BytesIO()
        write_tree_diff(buffer, repo.object_store, old_tree, new_tree)
        return buffer.getvalue()

    # -- restore --------------------------------------------------------------------------

    def restore(self, sha: str) -> Restored:
        """Undo one version as a new version: the files it changed go back to their state
        before it. History is kept, so the restore can itself be restored."""
        self.commit_manual_edits()
        full = self.resolve(sha)
        undone, _ = self.show(full)
        with self._open() as repo:
            parents = repo[full.encode()].parents  # type: ignore[attr-defined]
        if not parents:
            raise GitStoreError(f"{undone.short} is the first version; there is nothing before it")
        history = self.log(limit=100_000)  # newest first
        newer = history[: [v.sha for v in history].index(full)]
        later = [v for v in newer if set(v.files) & set(undone.files)]
        before = self.files_at(parents[0])
        target = self.files_at(self._head())
        for rel in undone.files:
            target[rel] = before.get(rel)
        try:
            version = self._commit(target, f"restore {undone.short}")
        except GitStoreError:
            raise GitStoreError(
                f"the files already match their state before {undone.short}; nothing to restore"
            ) from None
        for rel in undone.files:
            path = self.workspace / rel
            content = target[rel]
            if content is None:
                path.unlink(missing_ok=True)
            else:
                atomic_write_text(path, content.decode("utf-8", errors="replace"))
        return Restored(version, undone, later)


def _stats(diff: bytes) -> dict[str, tuple[int, int]]:
    stats: dict[str, tuple[int, int]] = {}
    current = None
    for raw in diff.decode("utf-8", errors="replace").splitlines():
        if raw.startswith("diff --git "):
            current = raw.split(" b/", 1)[-1]
            stats[current] = (0, 0)
        elif current and raw.startswith("+") and not raw.startswith("+++"):
            added, removed = stats[current]
            stats[current] = (added + 1, removed)
        elif current and raw.startswith("-") and not raw.startswith("---"):
            added, removed = stats[current]
            stats[current] = (added, removed + 1)
    return stats


def describe_stats(stats: dict[str, tuple[int, int]]) -> str:
    return ", ".join(f"{rel} +{a} -{r}" for rel, (a, r) in sorted(stats.items()))


def _message(kind: str, stats: dict[str, tuple[int, int]], diff: bytes, max_lines: int = 30) -> str:
    if not stats:
        return f"{kind}\n"
    changed = [
        line
        for line in diff.decode("utf-8", errors="replace").splitlines()
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    body = changed[:max_lines]
    if len(changed) > max_lines:
        body.append(f"… {len(changed) - max_lines} more changed lines")
    return f"{kind}: {describe_stats(stats)}\n\n" + "\n".join(body) + "\n"


def _dulwich_repo() -> type[Repo]:
    from dulwich.repo import Repo

    return Repo
