"""Versions of SOUL.md, USER.md and memory/MEMORY.md in a bare git repository.

The repository lives outside the workspace and has no index or worktree of its own: commits
are built from the files' bytes, and restores write files back atomically. So it can never
collide with a git repository the workspace happens to sit in, and the standard `git` reads
it (`git --git-dir=<home>/memory.git log`). All of it is blocking: call through to_thread.

Every write (a commit, a restore, the first version) holds the home's memory lock, so several
processes on one home take turns; a git lock file (a ref's or a loose object's) found while we
hold it was left by a killed process, and is removed.
"""

from __future__ import annotations

import io
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from nanomem.durable import atomic_write_text, unlink_below
from nanomem.locks import FileLock, LockBusy
from nanomem.text.masking import redact

if TYPE_CHECKING:  # dulwich itself is imported on first use: not on the way to the prompt
    from dulwich.objects import ObjectID, ShaFile
    from dulwich.refs import Ref
    from dulwich.repo import Repo

TRACKED = ("SOUL.md", "USER.md", "memory/MEMORY.md")
BRANCH = cast("Ref", b"refs/heads/main")
HEAD = cast("Ref", b"HEAD")
IDENTITY = b"nanomem <nanomem@localhost>"
FILE_MODE = 0o100644
DIR_MODE = 0o040000
LOCK_WAIT_S = 120.0  # writers hold the memory lock for milliseconds; this is a safety net
# Left behind when a process dies mid-update; only ever stale while we hold the memory lock.
REF_LOCKS = ("HEAD.lock", "packed-refs.lock", "refs/**/*.lock")

# The kinds of version, as their messages begin (`import from openclaw`, `restore 1a2b3c4d`).
KINDS = ("initial memory", "manual edit", "edit", "dream", "restore", "import")
Files = dict[str, bytes | None]  # path → content, None when the file does not exist
Annotated = list[tuple["ObjectID", bytes]]  # a file's lines, each with the version that wrote it
BLAMES_KEPT = 16  # (version, file) blames kept for deriving the next versions' from
BLAME_STEPS = 1_000  # versions walked back looking for a kept blame before one from scratch


def _remove_stale_lock(stale: Path) -> None:
    from loguru import logger  # only here: onboarding runs before the chat prompt

    stale.unlink(missing_ok=True)
    logger.warning("memory.git: removed the stale lock file {} (left by a killed process)", stale)


def _blob_id(repo: Repo, tree: ObjectID, path: bytes) -> ObjectID | None:
    try:
        _, blob = repo[tree].lookup_path(repo.object_store.__getitem__, path)  # type: ignore[attr-defined]
    except KeyError:
        return None
    return cast("ObjectID", blob)


def _add_object(repo: Repo, obj: ShaFile) -> None:
    """Write a loose object. A process killed while writing one leaves `<object>.lock`, which
    would refuse this write forever; we hold the memory lock, so it is stale. Looked for only
    when a write is refused: scanning every object folder on each commit grows with history."""
    from dulwich.file import FileLocked

    try:
        repo.object_store.add_object(obj)
    except FileLocked as locked:
        _remove_stale_lock(Path(os.fsdecode(locked.lockfilename)))
        repo.object_store.add_object(obj)


MAX_TRACKED_BYTES = 64 * 1024 * 1024  # far above any memory file; a bound all the same


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

    @property
    def kind(self) -> str:
        """What made it: `dream`, `edit`, `manual edit`, `restore`, `import`, `initial memory`."""
        head = self.summary.split(":", 1)[0]
        return next((k for k in KINDS if head == k or head.startswith(f"{k} ")), head)


@dataclass(frozen=True)
class Restored:
    version: Version  # the new commit
    undone: Version  # the change that was undone
    overwritten_later: list[Version]  # later changes to the same files, also undone
    notes: tuple[str, ...] = ()  # what the after_restore hooks undid beside the files


class GitStore:
    def __init__(
        self,
        git_dir: Path,
        workspace: Path,
        tracked: tuple[str, ...] = TRACKED,
        *,
        lock: FileLock | None = None,
    ) -> None:
        self.git_dir = git_dir
        self.workspace = workspace
        self.tracked = tracked
        self.lock = lock or FileLock(git_dir.parent / "locks" / "memory.lock")
        self._blames: dict[tuple[ObjectID, bytes], Annotated] = {}
        self._blames_lock = threading.Lock()  # blames run in worker threads
        # Run after a restore, still holding the memory lock, with the version undone: what a
        # version brought beside the files (an import's skills) goes with it. Each returns lines
        # to tell the person.
        self.after_restore: list[Callable[[Version], list[str]]] = []

    # -- setup and commits ----------------------------------------------------------------

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the memory lock (re-entrant in this thread) for writes to the repository or
        the memory files on behalf of Dream or a restore."""
        try:
            self.lock.acquire_sync(LOCK_WAIT_S)
        except LockBusy:
            raise GitStoreError("memory is being changed by another process; try again") from None
        try:
            self._clear_stale_ref_locks()
            yield
        finally:
            self.lock.release()

    def _clear_stale_ref_locks(self) -> None:
        for pattern in REF_LOCKS:
            for stale in self.git_dir.glob(pattern):
                _remove_stale_lock(stale)

    def ensure(self) -> None:
        """Create the repository on first use, with the current files as the first version."""
        if (self.git_dir / "HEAD").exists() and self._head() is not None:
            return
        with self.writing():
            if not (self.git_dir / "HEAD").exists():
                self.git_dir.mkdir(parents=True, exist_ok=True)
                _dulwich_repo().init_bare(str(self.git_dir), default_branch=b"main").close()
            if self._head() is None:
                self._commit(self.read_workspace(), "initial memory", allow_empty=True)

    def read_workspace(self) -> Files:
        """The tracked files as they are now (None: absent), read as the file tools read: a
        link a shell command planted (USER.md -> the hidden config.toml) would otherwise be
        committed and shown to Dream's model; GitStoreError names it instead."""
        from nanomem.tools import ToolError, read_checked

        root = self.workspace.resolve()
        files: Files = {}
        for rel in self.tracked:
            if not os.path.lexists(root / rel):
                files[rel] = None
                continue
            try:
                files[rel] = read_checked(root, root / rel, rel, MAX_TRACKED_BYTES)
            except ToolError as exc:
                raise GitStoreError(
                    f"{exc}: memory files must be plain files in the workspace; nothing was "
                    f"read or committed until {rel} is one"
                ) from None
        return files

    def commit_if_changed(self, message: str) -> Version | None:
        """Commit the workspace's tracked files if they differ from the last version."""
        with self.writing():
            self.ensure()
            return self.commit_files(self.read_workspace(), message)

    def commit_files(
        self, files: Files, kind: str, trailer: str = "", title: str = ""
    ) -> Version | None:
        """Commit these contents (not re-read from disk) if they differ from the last version;
        `title`: the person's own summary, after the kind (`edit: <title>`)."""
        with self.writing():
            if files == self.files_at(self._head()):
                return None
            return self._commit(files, kind, trailer=trailer, title=title)

    def commit_manual_edits(self) -> Version | None:
        """Edits made outside Dream (by the person, or the chat agent) become their own version,
        so neither a Dream run nor a restore can silently discard them."""
        return self.commit_if_changed("manual edit")

    def has_changes(self) -> bool:
        """Whether any version came after the first, read without creating anything (a
        home about to be replaced is looked at, not set up)."""
        head = self._head()
        if head is None:
            return False
        with self._open() as repo:
            return bool(repo[head].parents)  # type: ignore[attr-defined]

    def _open(self) -> Repo:
        return _dulwich_repo()(str(self.git_dir))

    def _commit(
        self,
        files: Files,
        kind: str,
        *,
        allow_empty: bool = False,
        trailer: str = "",
        title: str = "",
    ) -> Version:
        """Commit `files`; the message is built from the real diff: `<kind>: <stats>` and the
        changed lines, never from anyone's claims about them. A `trailer` (`Key: value`) ends
        the message, where git's trailer tools find it."""
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
            message = _message(kind, stats, diff, title=title)
            message += f"\n{trailer}\n" if trailer else ""
            # The message quotes changed lines: a known secret in a memory file stays out of it.
            commit.message = redact(message).encode("utf-8")
            _add_object(repo, commit)
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
            _add_object(repo, blob)
            root.add(head.encode(), FILE_MODE, blob.id)
        for folder, children in nested.items():
            root.add(folder.encode(), DIR_MODE, self._write_tree(repo, children))
        _add_object(repo, root)
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

    def head_sha(self) -> str | None:
        head = self._head()
        return head.decode() if head is not None else None

    def head_trailer(self, key: str) -> str | None:
        """The value of a `key: value` trailer of the newest version, if it has one."""
        head = self._head()
        if head is None:
            return None
        with self._open() as repo:
            message = repo[head].message.decode("utf-8", errors="replace")  # type: ignore[attr-defined]
        paragraphs = message.strip().split("\n\n")
        for line in paragraphs[-1].splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip() == key:
                return value.strip()
        return None

    def files_at(self, sha: ObjectID | str | None) -> Files:
        if sha is None:
            return dict.fromkeys(self.tracked)
        if isinstance(sha, str):
            sha = cast("ObjectID", sha.encode())
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

    def log(self, limit: int = 20, skip: int = 0) -> list[Version]:
        """Newest first, from the `skip`-th; only the versions returned are diffed."""
        self.ensure()
        with self._open() as repo:
            head = self._head(repo)
            if head is None:
                return []
            walker = repo.get_walker([head], max_entries=skip + limit)
            return [self._version(repo, e.commit.id) for e in list(walker)[skip:]]

    def walk(self, limit: int, since: datetime | None = None) -> list[tuple[str, datetime]]:
        """The newest `limit` versions' ids and times, newest first, without their diffs;
        with `since`, up to the first version older than it (included)."""
        self.ensure()
        found: list[tuple[str, datetime]] = []
        with self._open() as repo:
            head = self._head(repo)
            if head is None:
                return []
            for entry in repo.get_walker([head], max_entries=limit):
                when = datetime.fromtimestamp(entry.commit.commit_time).astimezone()
                found.append((entry.commit.id.decode(), when))
                if since is not None and when < since:
                    break
        return found

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

    def shown(self, sha: str) -> tuple[Version, str]:
        """A version and its diff as a person sees it: a key pasted into USER.md is in the
        file, never on a screen."""
        version, diff = self.show(sha)
        return version, redact(diff)

    def version(self, sha: str) -> Version:
        with self._open() as repo:
            return self._version(repo, cast("ObjectID", sha.encode()))

    def parents(self, sha: str) -> list[str]:
        with self._open() as repo:
            return [p.decode() for p in repo[sha.encode()].parents]  # type: ignore[attr-defined]

    def blame(self, rel: str, at: str | None = None) -> list[tuple[str, str]]:
        """Each line of `rel` in version `at` (default: the newest) with the version that wrote
        it, in file order (as dulwich's annotate has it: [] if no version up to `at` had the
        file, its last lines if `at` deleted it)."""
        with self._open() as repo:
            start = cast("ObjectID", at.encode()) if at else self._head(repo)
            if start is None:
                return []
            annotated = self._annotated(repo, start, rel.encode())
        return [
            (sha.decode(), line.decode("utf-8", errors="replace").rstrip("\r\n"))
            for sha, line in annotated
        ]

    def _annotated(self, repo: Repo, start: ObjectID, path: bytes) -> Annotated:
        """A blame derived from a kept blame of an ancestor, by the step dulwich's annotate
        takes for each version that changed the file (a difflib match against the lines so
        far), so it equals a blame from scratch: that one reads the whole memory history
        (about a second at 1,000 versions), and every Dream run makes a new newest version.
        History here is a single line of first parents, and the tracked paths never move."""
        from dulwich.annotate import update_lines

        with self._blames_lock:
            kept = {
                sha: lines for (sha, kept_path), lines in self._blames.items() if kept_path == path
            }
        newer: list[ObjectID] = []
        sha: ObjectID | None = start if kept else None  # nothing kept: no ancestor to look for
        found: Annotated | None = None
        while sha is not None and len(newer) < BLAME_STEPS:
            found = kept.get(sha)
            if found is not None:
                break
            newer.append(sha)
            parents = repo[sha].parents  # type: ignore[attr-defined]
            sha = parents[0] if parents else None
        if found is None:
            found = self._annotate_from_scratch(repo, start, path)
        else:
            for step in reversed(newer):
                commit = repo[step]
                blob = _blob_id(repo, commit.tree, path)  # type: ignore[attr-defined]
                before = _blob_id(repo, repo[commit.parents[0]].tree, path)  # type: ignore[attr-defined]
                if blob is not None and blob != before:  # a deletion changes no line's author
                    lines = cast("list[Any]", found)
                    updated = update_lines(lines, step, repo[blob])  # type: ignore[arg-type]
                    found = cast("Annotated", updated)
        with self._blames_lock:
            self._blames.pop((start, path), None)
            self._blames[(start, path)] = found  # the most recently asked last
            while len(self._blames) > BLAMES_KEPT:
                self._blames.pop(next(iter(self._blames)))
        return found

    def _annotate_from_scratch(self, repo: Repo, start: ObjectID, path: bytes) -> Annotated:
        # dulwich's annotate reads only the object store, so it works on this bare repository.
        # Not following renames: the tracked paths never move, and a version that drops one
        # file and brings back another much like it would otherwise be blamed unlike the same
        # version derived step by step.
        from dulwich.annotate import annotate_lines

        lines = annotate_lines(repo.object_store, start, path, follow=False)
        return [(commit.id, line) for (commit, _), line in lines]

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
        with self.writing():
            restored = self._restore(sha)
            notes = [line for hook in self.after_restore for line in hook(restored.undone)]
        return replace(restored, notes=tuple(notes))

    def _restore(self, sha: str) -> Restored:
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
        if target == self.files_at(self._head()):
            raise GitStoreError(
                f"the files already match their state before {undone.short}; nothing to restore"
            )
        # Files first, then the commit: a kill in between leaves the restored files, which the
        # next writer commits as a manual edit; the other order would lose the undo.
        self.write_files(target)
        version = self._commit(target, f"restore {undone.short}")
        return Restored(version, undone, later)

    def write_files(self, files: Files) -> None:
        """Put these contents into the workspace, each file atomically, only where they differ."""
        for rel, content in files.items():
            path = self.workspace / rel
            # No link below the workspace followed: a shell command may have planted one.
            try:
                if content is None:
                    unlink_below(self.workspace, Path(rel))
                elif not path.exists() or path.read_bytes() != content:
                    text = content.decode("utf-8", errors="replace")
                    atomic_write_text(path, text, within=self.workspace)
            except OSError as exc:
                raise GitStoreError(
                    f"{rel} could not be written ({exc.strerror or exc}): memory files must be "
                    "plain files in plain folders of the workspace, not links"
                ) from None


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


def _message(
    kind: str, stats: dict[str, tuple[int, int]], diff: bytes, max_lines: int = 30, title: str = ""
) -> str:
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
    head = (
        f"{kind}: {title}\n\n{describe_stats(stats)}"
        if title
        else f"{kind}: {describe_stats(stats)}"
    )
    return f"{head}\n\n" + "\n".join(body) + "\n"


def _dulwich_repo() -> type[Repo]:
    from dulwich.repo import Repo

    return Repo
