"""Chat transcripts for README and docs/, made by running the real `nanomem chat` in a
pseudo-terminal against the scripted loopback model, and read off the screen it drew.

`.venv/bin/python -m tests.helpers.transcripts` rewrites every ```text block that follows a
`<!-- transcript: NAME -->` comment in README.md and docs/*.md; `--check` only says which
differ (exit 1). Ids and times that change from run to run are written as `…`.
"""

from __future__ import annotations

import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pexpect

from nanomem.cli.onboard import onboard
from nanomem.home import Home
from tests.conftest import cli_env, run_cli
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import WAIT_S
from tests.helpers.dream import script_a_dream

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "you ›"
WIDTH = 100
CSI = re.compile(r"\x1b\[([?0-9;]*)([A-Za-z@])")


class Screen:
    """Just enough of a terminal to read what `nanomem chat` leaves on screen: printing,
    carriage returns, line feeds, cursor moves and erasing; colours and modes ignored."""

    def __init__(self) -> None:
        self.lines: list[list[str]] = [[]]
        self.row = 0
        self.col = 0

    def feed(self, data: str) -> None:
        at = 0
        while at < len(data):
            match = CSI.match(data, at) if data[at] == "\x1b" else None
            if match:
                self._control(match.group(1), match.group(2))
                at = match.end()
                continue
            self._put(data[at])
            at += 1

    def _line(self) -> list[str]:
        while len(self.lines) <= self.row:
            self.lines.append([])
        return self.lines[self.row]

    def _put(self, char: str) -> None:
        if char == "\r":
            self.col = 0
        elif char == "\n":
            self.row += 1
        elif char == "\x1b" or ord(char) < 32:
            pass
        else:
            if self.col >= WIDTH:
                self.row, self.col = self.row + 1, 0
            line = self._line()
            line.extend(" " * (self.col + 1 - len(line)))
            line[self.col] = char
            self.col += 1

    def _control(self, params: str, command: str) -> None:
        if params.startswith("?") or command not in "ABCDKJ":
            return
        n = int(params.split(";")[0] or (1 if command in "ABCD" else 0))
        if command == "A":
            self.row = max(0, self.row - n)
        elif command == "B":
            self.row += n
        elif command == "C":
            self.col += n
        elif command == "D":
            self.col = max(0, self.col - n)
        elif command == "K":
            line = self._line()
            if n == 1:
                line[: self.col] = " " * min(self.col, len(line))
            else:
                del line[0 if n == 2 else self.col :]
        elif command == "J":
            del self._line()[self.col :]
            del self.lines[self.row + 1 :]

    def text(self) -> str:
        return "\n".join("".join(line).rstrip() for line in self.lines).strip("\n")


@dataclass
class Scene:
    """Typed lines, each answered once the chat asks again (the prompt or a question)."""

    script: Callable[[FakeOpenAI, Home], None]
    typed: list[str]
    env: dict[str, str]


def first_chat(llm: FakeOpenAI, home: Home) -> None:
    llm.reply("Hello! I'm your nanomem agent. I keep notes on what you tell me, so ask away.")
    llm.tool_call("list_dir", {"path": "."})
    llm.reply(
        "Your workspace holds:\n\n- `SOUL.md`: my voice and habits\n- `USER.md`: what I know "
        "about you\n- `AGENTS.md`: how I work\n- `memory/`: `MEMORY.md` and the archive"
    )


def shell_approval(llm: FakeOpenAI, home: Home) -> None:
    (home.workspace / "notes").mkdir()
    (home.workspace / "notes" / "todo.txt").write_text("water the plants\ncall mum\n")
    llm.tool_call("exec", {"command": "wc -l notes/todo.txt"})
    llm.reply("`notes/todo.txt` has 2 lines.")


def recall(llm: FakeOpenAI, home: Home) -> None:
    entry = (
        '{"cursor": 1, "timestamp": "2026-03-14T18:02:11+01:00", "session": "telegram:42", '
        '"content": "- 2026-03-14: the user keeps grandpa\'s old notebook in the attic, in the '
        'blue box by the window", "kind": "summary", "v": 1}\n'
    )
    (home.workspace / "memory" / "history.jsonl").write_text(entry)
    llm.tool_call("search_history", {"query": "attic"})
    llm.reply("In March you said the old notebook is in the attic, in the blue box by the window.")


def dream_review(llm: FakeOpenAI, home: Home) -> None:
    env = cli_env(home, llm, **TERMINAL, **REVIEW)
    llm.reply("Nice to meet you, Ada!")
    llm.reply("- 2026-11-22: the user is Ada and loves green tea")
    script_a_dream(llm)
    for args in (["chat", "-m", "I'm Ada and I love green tea"], ["chat", "-m", "/new"], ["dream"]):
        done = run_cli(*args, env=env)
        assert done.returncode == 0, done.stderr


REVIEW = {"NANOMEM_DREAM__REVIEW": "ask"}
SCENES = {
    "first-chat": Scene(first_chat, ["hi!", "what is in your workspace?"], {}),
    "shell-approval": Scene(
        shell_approval,
        ["how many lines has my todo list?", "y"],
        {"NANOMEM_TOOLS__SHELL_ENABLED": "true"},
    ),
    "recall": Scene(recall, ["what did we say about the attic?"], {}),
    "dream-review": Scene(dream_review, ["/dream-approve", "/why green tea"], REVIEW),
}
# prompt_toolkit turns bracketed paste on as it starts reading a line: the prompt, or a question
# (a typed line's echo also draws the prompt, so the prompt's text alone is no sign).
TERMINAL = {
    "TERM": "xterm",
    "PROMPT_TOOLKIT_NO_CPR": "1",
    "NANOMEM_LLM__MODEL": "openai/gpt-4o-mini",
}
READING = "\x1b[?2004h"


def run(name: str) -> str:
    scene = SCENES[name]
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAI() as llm:
        home = Home(Path(tmp) / "home")
        onboard(home)
        scene.script(llm, home)
        child = pexpect.spawn(
            sys.executable,
            ["-m", "nanomem", "chat"],
            env=cli_env(home, llm, **TERMINAL, **scene.env),
            encoding="utf-8",
            timeout=WAIT_S,
            dimensions=(60, WIDTH),
        )
        drawn = []
        try:
            for line in [*scene.typed, None]:
                child.expect_exact(READING)
                drawn.append(child.before + child.after)
                child.expect_exact([PROMPT, "always] ›"])  # the prompt or question drawn after it
                drawn.append(child.before + child.after)
                if line is not None:
                    child.sendline(line)
            child.sendcontrol("d")
            child.expect(pexpect.EOF)
            drawn.append(child.before)
        finally:
            child.terminate(force=True)
    screen = Screen()
    screen.feed("".join(drawn))
    text = screen.text()
    text = text[: text.rindex(f"\n{PROMPT}")].rstrip()  # up to the prompt left waiting
    ids = dict.fromkeys(re.findall(r"\b[0-9a-f]{8}\b", text))
    for made, shown in zip(ids, STABLE_IDS, strict=False):
        text = text.replace(made, shown)
    return text


STABLE_IDS = ["3f2a9c1e", "7b41d0a2", "c09e5f13"]  # ids made afresh by each run, shown as these
DATES = re.compile(r"\d{4}-\d\d-\d\d( \d\d:\d\d)?")  # a run's own date: no difference
BLOCK = re.compile(r"(<!-- transcript: ([\w-]+) -->\n```text\n)(.*?)(^```)", re.S | re.M)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    made: dict[str, str] = {}
    stale = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8")

        def fill(match: re.Match[str]) -> str:
            name = match.group(2)
            if name not in made:
                made[name] = run(name)
            return match.group(1) + made[name] + "\n" + match.group(4)

        new = BLOCK.sub(fill, text)
        if DATES.sub("…", new) != DATES.sub("…", text):
            stale.append(page.relative_to(ROOT))
            if not check:
                page.write_text(new, encoding="utf-8")
    for page in stale:
        print(f"{page}: {'differs from' if check else 'rewritten from'} a real run")
    return 1 if check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
