"""A memory file edited whole (the web app's Memory page): one version with the person's
summary, refused when the file changed since the edit began, nothing lost either way."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nanomem.memory.edits import (
    MAX_EDIT_BYTES,
    EditConflict,
    digest,
    save_edit,
    shown,
)
from nanomem.memory.gitstore import GitStore, GitStoreError


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


def edit(store: GitStore, rel: str, text: str, summary: str = "my words") -> str:
    now = shown(store)
    version = save_edit(store, rel, text, summary, now.head or "", now.digests[rel])
    return version.sha


def test_an_edit_is_one_version_of_kind_edit_with_the_summary(
    store: GitStore, workspace: Path
) -> None:
    sha = edit(store, "USER.md", "# User\r\n- Name: Ada\r\n", "  Ada's   name\n")
    (newest, first) = store.log()
    assert newest.sha == sha and first.kind == "initial memory"
    assert newest.kind == "edit"
    assert newest.summary == "edit: Ada's name"
    assert newest.files == {"USER.md": (1, 0)}
    assert "+- Name: Ada" in newest.message
    assert (workspace / "USER.md").read_bytes() == b"# User\n- Name: Ada\n"  # no CR kept


def test_changes_not_yet_versioned_keep_a_version_of_their_own(
    store: GitStore, workspace: Path
) -> None:
    now = shown(store)
    (workspace / "SOUL.md").write_text("# Soul\n- kind\n- brief\n")  # the assistant, meanwhile
    save_edit(store, "USER.md", "# User\n- Ada\n", "name", now.head or "", now.digests["USER.md"])
    edited, manual, _ = store.log()
    assert (edited.kind, edited.files) == ("edit", {"USER.md": (1, 0)})
    assert (manual.kind, manual.files) == ("manual edit", {"SOUL.md": (1, 0)})


def test_a_change_made_meanwhile_is_refused_and_named(store: GitStore, workspace: Path) -> None:
    now = shown(store)  # the page was opened here
    (workspace / "USER.md").write_text("# User\n- Dream learned this\n")
    dreamed = store.commit_files(store.read_workspace(), "dream")
    assert dreamed is not None
    with pytest.raises(EditConflict) as refused:
        save_edit(store, "USER.md", "# User\n- mine\n", "x", now.head or "", now.digests["USER.md"])
    assert refused.value.changes == [dreamed]
    assert f"dream: USER.md +1 -0 ({dreamed.short})" in str(refused.value)
    assert (workspace / "USER.md").read_text() == "# User\n- Dream learned this\n"
    assert store.log()[0] == dreamed


def test_a_change_to_another_file_is_no_conflict(store: GitStore, workspace: Path) -> None:
    now = shown(store)
    (workspace / "memory" / "MEMORY.md").write_text("# Memory\n- other tab\n")
    store.commit_manual_edits()
    save_edit(store, "USER.md", "# User\n- mine\n", "x", now.head or "", now.digests["USER.md"])
    assert (workspace / "USER.md").read_text() == "# User\n- mine\n"


def test_an_edit_not_yet_versioned_is_named_as_such(store: GitStore, workspace: Path) -> None:
    now = shown(store)
    (workspace / "USER.md").write_text("# User\n- the assistant wrote this\n")
    with pytest.raises(EditConflict, match="an edit not saved yet"):
        save_edit(store, "USER.md", "# User\n", "x", now.head or "", now.digests["USER.md"])


@pytest.mark.parametrize(
    ("rel", "text", "summary", "said"),
    [
        ("config.toml", "x", "s", "is not a memory file"),
        ("USER.md", "x", "   ", "the summary is empty"),
        ("USER.md", "x", "s" * 201, "longer than 200 characters"),
        ("USER.md", "x" * (MAX_EDIT_BYTES + 1), "s", "memory files stay under"),
        ("USER.md", "# User\n", "s", "unchanged"),
    ],
)
def test_bad_edits_change_nothing(
    store: GitStore, workspace: Path, rel: str, text: str, summary: str, said: str
) -> None:
    now = shown(store)
    before = store.head_sha()
    with pytest.raises(GitStoreError, match=said):
        save_edit(store, rel, text, summary, now.head or "", now.digests["USER.md"])
    assert store.head_sha() == before
    assert (workspace / "USER.md").read_text() == "# User\n"


def test_a_planted_link_is_neither_shown_nor_written_through(
    store: GitStore, workspace: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "config.toml"
    secret.write_text("api_key = 'sk-secret'\n")
    (workspace / "USER.md").unlink()
    os.link(secret, workspace / "USER.md")  # a hard link: no path check sees where it leads
    with pytest.raises(GitStoreError, match="hard link"):
        shown(store)
    with pytest.raises(GitStoreError, match="hard link"):
        save_edit(store, "USER.md", "pwned", "x", store.head_sha() or "", digest(None))
    assert secret.read_text() == "api_key = 'sk-secret'\n"
    (workspace / "USER.md").unlink()
    (workspace / "USER.md").symlink_to(secret)
    with pytest.raises(GitStoreError, match="link"):
        save_edit(store, "USER.md", "pwned", "x", store.head_sha() or "", digest(None))
    assert secret.read_text() == "api_key = 'sk-secret'\n"
