import os
import threading
from pathlib import Path

import pytest

from nanomem import audience
from nanomem.locks import FileLock
from nanomem.tools import OUTSIDE, ToolContext
from nanomem.tools.files import FileTools
from nanomem.tools.registry import ToolError
from nanomem.tools.safe_open import read_checked, write_checked
from tests.fakes.web_server import tiny_pdf


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "memory").mkdir(parents=True)
    (root / "memory" / "MEMORY.md").write_text("# Memory\n- likes tea\n")
    (root / "memory" / "history.jsonl").write_text("{}\n")
    (tmp_path / "secret.txt").write_text("TOP SECRET")
    return root


def tools(workspace: Path, restrict: bool = True) -> FileTools:
    return FileTools(workspace, restrict=restrict, read_only=("memory/history.jsonl",))


async def test_write_read_edit_list(workspace: Path) -> None:
    ft = tools(workspace)
    assert "Wrote 11 characters" in ft.write_file(OUTSIDE, "notes/today.md", "line1\nline2")
    assert await ft.read_file(OUTSIDE, "notes/today.md") == "line1\nline2"
    assert await ft.read_file(OUTSIDE, "notes/today.md", start_line=2) == "line2"
    ft.edit_file(OUTSIDE, "notes/today.md", "line2", "second line")
    assert (workspace / "notes/today.md").read_text() == "line1\nsecond line"
    listing = ft.list_dir(OUTSIDE, ".")
    assert "memory/" in listing and "notes/" in listing


@pytest.mark.parametrize(
    "path",
    ["../secret.txt", "notes/../../secret.txt", "/etc/passwd", "~/secret.txt", "~", "..", ""],
)
async def test_paths_outside_the_workspace_are_refused(workspace: Path, path: str) -> None:
    with pytest.raises(ToolError):
        await tools(workspace).read_file(OUTSIDE, path)


async def test_symlink_escape_is_refused_for_files_and_folders(
    workspace: Path, tmp_path: Path
) -> None:
    (workspace / "link.txt").symlink_to(tmp_path / "secret.txt")
    (workspace / "outside").symlink_to(tmp_path)
    ft = tools(workspace)
    with pytest.raises(ToolError, match="outside the workspace"):
        await ft.read_file(OUTSIDE, "link.txt")
    with pytest.raises(ToolError, match="outside the workspace"):
        await ft.read_file(OUTSIDE, "outside/secret.txt")
    with pytest.raises(ToolError, match="outside the workspace"):
        ft.write_file(OUTSIDE, "outside/new.txt", "x")
    assert not (tmp_path / "new.txt").exists()


async def test_symlink_inside_the_workspace_is_fine(workspace: Path) -> None:
    (workspace / "mem").symlink_to(workspace / "memory")
    assert "likes tea" in await tools(workspace).read_file(OUTSIDE, "mem/MEMORY.md")


def test_edit_needs_exactly_one_match(workspace: Path) -> None:
    ft = tools(workspace)
    ft.write_file(OUTSIDE, "a.txt", "x y x")
    with pytest.raises(ToolError, match="not found"):
        ft.edit_file(OUTSIDE, "a.txt", "z", "w")
    with pytest.raises(ToolError, match="occurs 2 times"):
        ft.edit_file(OUTSIDE, "a.txt", "x", "w")
    assert (workspace / "a.txt").read_text() == "x y x"


async def test_protected_files_are_read_only(workspace: Path) -> None:
    ft = tools(workspace)
    assert await ft.read_file(OUTSIDE, "memory/history.jsonl") == "{}\n"
    with pytest.raises(ToolError, match="maintained by nanomem"):
        ft.write_file(OUTSIDE, "memory/history.jsonl", "")
    with pytest.raises(ToolError, match="maintained by nanomem"):
        ft.edit_file(OUTSIDE, "memory/history.jsonl", "{}", "[]")


async def test_binary_and_missing_files(workspace: Path) -> None:
    (workspace / "blob.bin").write_bytes(b"\x00\x01\x02")
    ft = tools(workspace)
    with pytest.raises(ToolError, match="binary"):
        await ft.read_file(OUTSIDE, "blob.bin")
    with pytest.raises(ToolError, match="no file"):
        await ft.read_file(OUTSIDE, "nope.txt")


async def test_a_pdf_is_read_as_its_text_by_page_and_lines(workspace: Path) -> None:
    (workspace / "media").mkdir()
    (workspace / "media" / "report.pdf").write_bytes(tiny_pdf(["Revenue rose", "Costs fell"]))
    ft = tools(workspace)
    assert await ft.read_file(OUTSIDE, "media/report.pdf") == "## Page 1\nRevenue rose\nCosts fell"
    assert (
        await ft.read_file(OUTSIDE, "media/report.pdf", start_line=2, max_lines=1)
        == "Revenue rose\n"
    )
    (workspace / "broken.pdf").write_bytes(b"%PDF-1.4\nnot really")
    with pytest.raises(ToolError, match="could not be read as a PDF"):
        await ft.read_file(OUTSIDE, "broken.pdf")


async def test_unrestricted_mode_allows_absolute_paths(workspace: Path, tmp_path: Path) -> None:
    assert (
        await tools(workspace, restrict=False).read_file(OUTSIDE, str(tmp_path / "secret.txt"))
        == "TOP SECRET"
    )


def test_writes_to_memory_files_wait_for_the_memory_lock(tmp_path: Path) -> None:
    lock = FileLock(tmp_path / "locks" / "memory.lock")
    tools = FileTools(tmp_path, memory_files=("USER.md",), memory_lock=lock)
    lock.acquire_sync()  # as Dream holds it while it applies and commits
    writer = threading.Thread(target=tools.write_file, args=(OUTSIDE, "USER.md", "- mine\n"))
    writer.start()
    writer.join(0.3)
    assert writer.is_alive() and not (tmp_path / "USER.md").exists()
    tools.write_file(OUTSIDE, "notes.md", "other files never wait")  # positive control
    lock.release()
    writer.join(10)
    assert (tmp_path / "USER.md").read_text() == "- mine\n"


async def test_a_hard_link_is_refused_and_marked(workspace: Path) -> None:
    os.link(workspace / "memory" / "MEMORY.md", workspace / "copy.md")
    ft = tools(workspace)
    for action in (
        lambda: ft.write_file(OUTSIDE, "copy.md", "x"),
        lambda: ft.edit_file(OUTSIDE, "copy.md", "tea", "coffee"),
    ):
        with pytest.raises(ToolError, match="hard link"):
            action()
    assert "copy.md  (a hard link: refused)" in ft.list_dir(OUTSIDE, ".")
    assert "likes tea" in (workspace / "memory" / "MEMORY.md").read_text()


def test_a_folder_swapped_for_a_link_after_the_check_is_refused(
    workspace: Path, tmp_path: Path
) -> None:
    # The race: the path was checked (resolved inside the workspace), then a folder on the way
    # became a link to somewhere else before the open.
    (workspace / "notes").mkdir()
    (workspace / "notes" / "a.md").write_text("mine")
    checked = tools(workspace).resolve("notes/a.md")
    (workspace / "notes").rename(workspace / "old")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "a.md").write_text("TOP SECRET")
    (workspace / "notes").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ToolError, match="changed while it was opened"):
        read_checked(workspace.resolve(), checked, "notes/a.md", 100)


async def test_a_fifo_or_a_folder_is_not_read(workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    ft = tools(workspace)
    with pytest.raises(ToolError, match="not a regular file"):
        await ft.read_file(OUTSIDE, "pipe")  # and does not hang waiting for a writer
    with pytest.raises(ToolError, match="is a folder"):
        await ft.read_file(OUTSIDE, "memory")
    assert "pipe  (not a regular file)" in ft.list_dir(OUTSIDE, ".")


async def test_in_a_group_the_root_is_its_room_whatever_restrict_says(workspace: Path) -> None:
    ft = tools(workspace, restrict=False)

    in_the_group = ToolContext(audience=audience.audience_of("telegram:-100555", True))
    ft.write_file(in_the_group, "notes.md", "ours")
    for outside in ("/etc/passwd", "../../memory/MEMORY.md", "~/x"):
        with pytest.raises(ToolError, match="this group's folder"):
            await ft.read_file(in_the_group, outside)
    room = audience.room_folder(workspace, "telegram:-100555", True)
    assert room is not None and (room / "notes.md").read_text() == "ours"
    assert not (workspace / "notes.md").exists()


def test_a_write_into_a_folder_swapped_for_a_link_after_the_check_is_refused(
    workspace: Path, tmp_path: Path
) -> None:
    (workspace / "notes").mkdir()
    checked = tools(workspace).resolve("notes/a.md")
    (workspace / "notes").rmdir()
    (tmp_path / "elsewhere").mkdir()
    (workspace / "notes").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ToolError, match="changed while it was written"):
        write_checked(workspace.resolve(), checked, "planted", "notes/a.md")
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_write_keeps_the_mode_and_leaves_no_temporary_file(workspace: Path) -> None:
    script = workspace / "run.sh"
    script.write_text("echo old\n")
    script.chmod(0o750)
    tools(workspace).write_file(OUTSIDE, "run.sh", "echo new\n")
    assert script.read_text() == "echo new\n" and (script.stat().st_mode & 0o777) == 0o750
    assert [p.name for p in workspace.iterdir() if p.name.endswith(".tmp")] == []
