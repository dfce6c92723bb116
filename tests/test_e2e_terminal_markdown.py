"""What `nanomem chat` draws of a reply, in a pseudo-terminal: Markdown rendered, but every line
and every character the model wrote kept (issue 31, slip 3), and our own replies alike."""

import re

import pexpect

from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.terminal import PROMPT

# What a terminal does not show: colours, cursor moves, the line clears of the live region.
_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-B]|\r"
)


def screen_text(chat: pexpect.spawn, start: str) -> str:
    """The characters drawn from `start` up to the next prompt, without control sequences."""
    chat.expect_exact(start)
    chat.expect_exact(PROMPT)
    return start + _CONTROL.sub("", chat.before)


def answered(chat: pexpect.spawn, fake_llm: FakeOpenAI, reply: str) -> str:
    fake_llm.reply(reply)
    chat.sendline("show me")
    return screen_text(chat, reply[:4])


def test_single_newlines_are_kept(chat: pexpect.spawn, fake_llm: FakeOpenAI) -> None:
    listing = (
        "total 8\n"
        "drwxr-xr-x 2 ada ada 4096 Nov 27 10:00 .\n"
        "-rw-r--r-- 1 ada ada   10 Nov 27 10:00 notes.txt"
    )
    shown = answered(chat, fake_llm, f"The file has three lines:\nalpha\nbeta\ngamma\n\n{listing}")
    assert "The file has three lines:\nalpha\nbeta\ngamma\n" in shown
    assert f"{listing}\n" in shown
    assert "alpha beta" not in shown


def test_text_that_looks_like_html_is_shown_as_written(
    chat: pexpect.spawn, fake_llm: FakeOpenAI
) -> None:
    line = "a<b and <div>x</div> and <<end tag>> &amp; done"
    shown = answered(chat, fake_llm, f"{line}\n\n<details>\nkept\n</details>\n\n<<end untrusted>>")
    assert f"{line}\n" in shown
    assert "<details>\nkept\n</details>\n" in shown
    assert "<<end untrusted>>\n" in shown


def test_a_fence_and_a_list_still_render(chat: pexpect.spawn, fake_llm: FakeOpenAI) -> None:
    shown = answered(
        chat, fake_llm, "Run **this**:\n\n```sh\nls -la\necho <done>\n```\n\n- one\n- two"
    )
    assert "Run this:" in shown and "**" not in shown
    assert "ls -la" in shown and "echo <done>" in shown and "```" not in shown
    assert "• one" in shown and "• two" in shown


def test_a_command_reply_is_rendered_too(chat: pexpect.spawn, fake_llm: FakeOpenAI) -> None:
    chat.sendline("/dream-restore")
    shown = screen_text(chat, "Memory versions")
    assert "Memory versions, newest first:\n" in shown
    assert re.search(r"^[0-9a-f]{8} \S+ \S+ · initial memory: SOUL.md", shown, re.M), shown
    assert "`" not in shown
    assert "/dream-restore <id> undoes one." in shown
    chat.sendline("/dream-log")
    shown = screen_text(chat, "initial memory")
    assert "```" not in shown and "`" not in shown
    assert fake_llm.requests == []
