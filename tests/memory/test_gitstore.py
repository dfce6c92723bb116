from __future__ import annotations

import random
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from nanomem.memory.gitstore import GitStore, GitStoreError
from tests.helpers.gitstore import FromScratch

if TYPE_CHECKING:
    pass


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "memory").mkdir(parents=True)
    (root / "SOUL.md").write_text("# Soul\n- kind\n")
    (root / "USER.md").write_text("# User\n")
    (root / "memory" / "MEMORY.md").write_text("# Memory\n")
    return root


@pytest.fixture
def store(tmp_path: Path, workspace: Path) -> GitStore:
    store = GitStore(tmp_path / "memory.git", workspace)
    store.ensure()
    return store


def test_first_version_holds_the_current_files(store: GitStore, workspace: Path) -> None:
    (first,) = store.log()
    assert first.summary.startswith("initial memory: SOUL.md +2 -0")
    assert store.files_at(first.sha.encode())["USER.md"] == b"# User\n"


def test_unchanged_files_make_no_commit(store: GitStore) -> None:
    assert store.commit_manual_edits() is None
    assert len(store.log()) == 1


def test_message_comes_from_the_real_diff(store: GitStore, workspace: Path) -> None:
    (workspace / "USER.md").write_text("# User\n- Name: Ada\n- Likes tea\n")
    version = store.commit_manual_edits()
    assert version is not None
    assert version.summary == "manual edit: USER.md +2 -0"
    assert "+- Name: Ada" in version.message
    assert version.files == {"USER.md": (2, 0)}


def test_show_and_prefix_resolution(store: GitStore, workspace: Path) -> None:
    (workspace / "memory" / "MEMORY.md").write_text("# Memory\n- project Apollo\n")
    version = store.commit_manual_edits()
    assert version is not None
    assert store.resolve(version.sha[:6].upper()) == version.sha
    shown, diff = store.show(version.sha)
    assert shown.sha == version.sha and "+- project Apollo" in diff
    with pytest.raises(GitStoreError, match="no memory version"):
        store.resolve("0000000")
    with pytest.raises(GitStoreError, match="not a version id"):
        store.resolve("abc")
    with pytest.raises(GitStoreError, match="not a version id"):
        store.resolve("zzzzzz")


def test_restore_is_a_new_commit_and_can_itself_be_restored(
    store: GitStore, workspace: Path
) -> None:
    user = workspace / "USER.md"
    user.write_text("# User\n- Name: Ada\n")
    learned = store.commit_if_changed("dream")
    assert learned is not None
    restored = store.restore(learned.sha[:8])
    assert user.read_text() == "# User\n"
    assert restored.version.summary.startswith(f"restore {learned.short}: USER.md +0 -1")
    assert [v.sha for v in store.log()][:2] == [restored.version.sha, learned.sha]
    again = store.restore(restored.version.sha)
    assert user.read_text() == "# User\n- Name: Ada\n"
    assert len(store.log()) == 4 and again.undone.sha == restored.version.sha


def test_restore_keeps_manual_edits_and_names_later_changes(
    store: GitStore, workspace: Path
) -> None:
    user = workspace / "USER.md"
    memory = workspace / "memory" / "MEMORY.md"
    user.write_text("# User\n- Name: Ada\n")
    first = store.commit_if_changed("dream")
    memory.write_text("# Memory\n- fact\n")
    store.commit_if_changed("dream")
    user.write_text("# User\n- Name: Ada\n- Likes tea\n")  # a later, uncommitted manual edit
    assert first is not None
    result = store.restore(first.sha)
    assert user.read_text() == "# User\n"
    assert memory.read_text() == "# Memory\n- fact\n"  # other files' later changes are kept
    assert [v.summary for v in result.overwritten_later] == ["manual edit: USER.md +1 -0"]
    assert any("Likes tea" in v.message for v in store.log())  # the manual edit is in history


def test_restoring_the_first_version_is_refused(store: GitStore) -> None:
    (first,) = store.log()
    with pytest.raises(GitStoreError, match="first version"):
        store.restore(first.sha)


def test_works_inside_another_git_repository_and_git_can_read_it(
    tmp_path: Path, workspace: Path
) -> None:
    git = shutil.which("git")
    if git is None:
        pytest.skip("no git binary on this machine")
    subprocess.run([git, "init", "-q", str(tmp_path)], check=True)  # the workspace's parent repo
    store = GitStore(tmp_path / "home" / "memory.git", workspace)
    store.ensure()
    (workspace / "USER.md").write_text("# User\n- Name: Ada\n")
    version = store.commit_manual_edits()
    assert version is not None
    git_dir = f"--git-dir={tmp_path / 'home' / 'memory.git'}"
    log = subprocess.run(
        [git, git_dir, "log", "--format=%H %s"], capture_output=True, text=True, check=True
    ).stdout
    assert log.splitlines()[0] == f"{version.sha} manual edit: USER.md +1 -0"
    fsck = subprocess.run([git, git_dir, "fsck", "--strict"], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr
    show = subprocess.run(
        [git, git_dir, "show", f"{version.sha}:USER.md"], capture_output=True, text=True, check=True
    )
    assert show.stdout == "# User\n- Name: Ada\n"
    outer = subprocess.run(
        [git, "-C", str(tmp_path), "status", "--porcelain"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "ws/" in outer  # the outer repository just sees ordinary files


def test_a_loose_object_lock_left_by_a_killed_process_is_removed(
    store: GitStore, workspace: Path
) -> None:
    from dulwich.objects import Blob

    content = b"# User\n- Name: Ada\n"
    sha = Blob.from_string(content).id.decode()
    folder = store.git_dir / "objects" / sha[:2]
    folder.mkdir(exist_ok=True)
    stale = folder / f"{sha[2:]}.lock"
    stale.write_bytes(b"x\x9c")  # what a write killed half-way leaves
    (workspace / "USER.md").write_bytes(content)
    version = store.commit_if_changed("manual edit")
    assert version is not None
    assert not stale.exists()
    # the object it refused before is written and readable
    assert store.files_at(version.sha)["USER.md"] == content


def edited(lines: list[bytes], rng: random.Random) -> list[bytes]:
    """Inserts, deletions, replacements and repeats, as people and Dream make them."""
    lines = list(lines)
    for _ in range(rng.randint(1, 4)):
        where = rng.randint(0, len(lines))
        kind = rng.choice(["insert", "insert", "delete", "replace", "repeat"])
        if kind == "insert" or not lines:
            lines.insert(where, f"- fact {rng.randint(0, 30)}\n".encode())
        elif kind == "delete":
            del lines[min(where, len(lines) - 1)]
        elif kind == "replace":
            lines[min(where, len(lines) - 1)] = f"- changed {rng.randint(0, 9)}\n".encode()
        else:
            lines.insert(where, rng.choice(lines))
    return lines


def test_a_blame_derived_from_a_kept_one_equals_a_blame_from_scratch(
    store: GitStore, workspace: Path
) -> None:
    rng = random.Random(7)
    memory: list[bytes] = [b"# Memory\n"]
    versions = [store.log(limit=1)[0].sha]
    for step in range(80):
        memory = edited(memory, rng)
        body = b"".join(memory)
        if step % 11 == 5:
            body = body.rstrip(b"\n")  # a last line without its newline
        files = store.read_workspace()
        files["memory/MEMORY.md"] = None if step in (30, 31) else body  # deleted, then back
        files["USER.md"] = b"# User\n" + body[: step % 5]  # versions that change another file
        if (made := store.commit_files(files, "dream")) is not None:
            versions.append(made.sha)
    assert len(versions) > 70
    following = FromScratch(store)  # asked about each new version as it comes
    for sha in versions:
        scratch = FromScratch(store)  # nothing kept: reads the whole history
        expected = scratch.blame("memory/MEMORY.md", sha)
        assert following.blame("memory/MEMORY.md", sha) == expected, sha
    assert following.count == 1  # the first; every later one followed from the one before
    leaping = FromScratch(store)
    leaping.blame("memory/MEMORY.md", versions[3])
    newest = leaping.blame("memory/MEMORY.md")  # many versions on, in one go
    assert newest == FromScratch(store).blame("memory/MEMORY.md")
    assert leaping.count == 1
    assert {sha for sha, _ in newest} > {versions[-1]}  # lines of several versions


def test_a_blame_after_a_file_moved_by_hand_is_the_same_derived_or_from_scratch(
    store: GitStore, workspace: Path
) -> None:
    """A version that drops USER.md and brings back memory/MEMORY.md holding much of it looks
    like a rename to git; the tracked paths never move, so neither blame follows it."""
    files = store.read_workspace()
    files["USER.md"] = b"# User\n- a\n- b\n- c\n- d\n"
    files["memory/MEMORY.md"] = None
    gone = store.commit_files(files, "dream")
    assert gone is not None
    following = FromScratch(store)
    following.blame("memory/MEMORY.md", gone.sha)
    files["USER.md"] = None
    files["memory/MEMORY.md"] = b"# User\n- a\n- b\n- c\n- d\n- e\n"
    moved = store.commit_files(files, "manual edit")
    assert moved is not None
    derived = following.blame("memory/MEMORY.md", moved.sha)
    assert following.count == 1
    assert derived == FromScratch(store).blame("memory/MEMORY.md", moved.sha)
    # the lines came with the version that brought them to this file, not from USER.md's past
    assert [sha for sha, _ in derived[1:]] == [moved.sha] * 5


def test_a_file_removed_by_a_restore_is_not_removed_through_a_planted_link(
    store: GitStore, workspace: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "MEMORY.md").write_text("not nanomem's")
    (workspace / "memory" / "MEMORY.md").unlink()
    (workspace / "memory").rmdir()
    (workspace / "memory").symlink_to(elsewhere)  # planted by a shell command
    with pytest.raises(GitStoreError, match=r"memory/MEMORY\.md could not be written"):
        store.write_files({"memory/MEMORY.md": None})
    assert (elsewhere / "MEMORY.md").read_text() == "not nanomem's"
    (workspace / "memory").unlink()
    (workspace / "memory").mkdir()
    (workspace / "memory" / "MEMORY.md").write_text("ours")
    store.write_files({"memory/MEMORY.md": None})  # the positive control: a real folder's file
    assert not (workspace / "memory" / "MEMORY.md").exists()


def test_every_kind_of_version_is_named(store: GitStore, workspace: Path) -> None:
    (workspace / "USER.md").write_text("# User\n- Ada\n")
    store.commit_manual_edits()
    files = store.read_workspace()
    for user, kind, title in [
        (b"# User\n- Ada\n- tea\n", "dream", ""),
        (b"# User\n", "edit", "restore: not really"),
        (b"# User\n- x\n", "import from openclaw", ""),
    ]:
        store.write_files({"USER.md": user})
        store.commit_files(files | {"USER.md": user}, kind, title=title)
    store.restore(store.log(limit=1)[0].sha)
    kinds = [v.kind for v in store.log()]
    assert kinds == ["restore", "import", "edit", "dream", "manual edit", "initial memory"]
    assert store.log()[2].summary == "edit: restore: not really"
    assert "USER.md +0 -2" in store.log()[2].message  # the stats follow the person's title


def test_log_pages_and_walk_stop_where_asked(store: GitStore, workspace: Path) -> None:
    for n in range(5):
        (workspace / "USER.md").write_text(f"# User\n- {n}\n")
        store.commit_manual_edits()
    everything = store.log(limit=100)
    assert [v.sha for v in store.log(limit=2, skip=3)] == [v.sha for v in everything[3:5]]
    assert store.log(limit=2, skip=10) == []
    walked = store.walk(100)
    assert [sha for sha, _ in walked] == [v.sha for v in everything]
    newest_time = walked[0][1]
    assert len(store.walk(100, since=newest_time + timedelta(seconds=1))) == 1  # the first older
    assert len(store.walk(2)) == 2
