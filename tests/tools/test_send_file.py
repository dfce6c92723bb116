"""The send_file tool on its own: what it checks, and what it hands the chat's outlet."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nanomem import audience
from nanomem.audience import Sender
from nanomem.tools import OUTSIDE, ToolContext
from nanomem.tools.files import MAX_SEND_BYTES, FileTools, _size
from nanomem.tools.registry import ToolError


class Chat:
    """An outlet that keeps what it was handed."""

    def __init__(self) -> None:
        self.files: list[tuple[str, str]] = []

    async def __call__(self, path: str, caption: str) -> None:
        self.files.append((path, caption))


def context(chat: Chat, session: str = "telegram:1000") -> ToolContext:
    room = session.startswith("telegram:-")  # as Telegram says
    return ToolContext(Sender("1000"), audience.audience_of(session, room), outlet=chat)


async def test_a_file_is_handed_to_the_chat_by_its_workspace_path(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "report.csv").write_bytes(b"a" * 2100)
    chat = Chat()
    said = await FileTools(tmp_path).send_file(context(chat), "out/report.csv", " here it is ")
    assert said == "sent report.csv (2.1 kB) to the chat"
    assert chat.files == [("out/report.csv", "here it is")]


async def test_a_groups_file_is_named_by_its_path_in_the_workspace(tmp_path: Path) -> None:
    session = "telegram:-100555"
    room = audience.room_folder(tmp_path, session, True)
    assert room is not None
    room.mkdir(parents=True)
    (room / "minutes.md").write_text("# Minutes\n")
    chat = Chat()
    await FileTools(tmp_path).send_file(context(chat, session), "minutes.md")
    assert chat.files == [(str(room.relative_to(tmp_path) / "minutes.md"), "")]


async def test_a_file_over_the_limit_is_refused_and_not_handed_over(tmp_path: Path) -> None:
    with (tmp_path / "big.bin").open("wb") as sparse:  # no 50 MB written: a hole
        sparse.truncate(MAX_SEND_BYTES + 1)
    chat = Chat()
    with pytest.raises(ToolError, match=r"is 50\.0 MB; a chat takes files up to 50\.0 MB"):
        await FileTools(tmp_path).send_file(context(chat), "big.bin")
    assert chat.files == []


async def test_with_nobody_to_receive_it_the_tool_says_so(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a")
    with pytest.raises(ToolError, match="no chat is there"):
        await FileTools(tmp_path).send_file(OUTSIDE, "a.txt")


async def test_a_hard_link_is_refused(tmp_path: Path) -> None:
    (tmp_path / "USER.md").write_text("# User\n")
    os.link(tmp_path / "USER.md", tmp_path / "copy.md")
    with pytest.raises(ToolError, match="hard link"):
        await FileTools(tmp_path).send_file(context(Chat()), "copy.md")


@pytest.mark.parametrize(
    ("size", "shown"),
    [(1, "1 byte"), (999, "999 bytes"), (2100, "2.1 kB"), (4_000_000, "4.0 MB")],
)
def test_sizes_read_as_a_person_reads_them(size: int, shown: str) -> None:
    assert _size(size) == shown
