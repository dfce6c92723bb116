"""Every ```bash block of README.md and docs/*.md runs for real, so the examples cannot drift:
in bash, with `nanomem` on the PATH, a fresh HOME whose `~/.nanomem` was onboarded with the
model pointed at the loopback fake, and a clone's folder (its `.venv` is this one) as the
working directory. A block that cannot run offline says why in an HTML comment just above it,
`<!-- not-run: needs a Telegram token -->`. Other comments just above a block script the model,
one call each: `<!-- model: "a reply" -->` or `<!-- model: {"tool": NAME, "arguments": {...}} -->`
(once the script is used up, the model answers with the last tool result, or "OK"). A ```text
block after `<!-- output -->` just below a block is what the block prints; `…` stands for any
text within a line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nanomem.cli.onboard import onboard
from nanomem.home import Home
from tests.conftest import TEST_KEY
from tests.fakes.openai_server import FakeOpenAI, Step

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*```(\S*)\s*$")
DIRECTIVE = re.compile(r"^\s*<!-- (not-run|model|output):?\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    code: str
    not_run: str | None = None
    model: tuple[Any, ...] = ()
    output: str | None = None
    problems: tuple[str, ...] = field(default=())

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _directives(lines: list[str], fence: int) -> tuple[dict[str, list[str]], list[str]]:
    """The comments just above line `fence` (0-based), nearest last."""
    found: dict[str, list[str]] = {}
    problems = []
    at = fence - 1
    while at >= 0 and (match := DIRECTIVE.match(lines[at])):
        found.setdefault(match.group(1), []).insert(0, match.group(2))
        at -= 1
    if "output" in found:
        problems.append("`<!-- output -->` belongs above a ```text block")
    return found, problems


def blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").split("\n")
    found: list[Block] = []
    at = 0
    while at < len(lines):
        opening = FENCE.match(lines[at])
        if not opening:
            at += 1
            continue
        end = next(i for i in range(at + 1, len(lines)) if FENCE.match(lines[i]))
        if opening.group(1) == "bash":
            indent = len(lines[at]) - len(lines[at].lstrip())
            code = "\n".join(line[indent:] for line in lines[at + 1 : end])
            directives, problems = _directives(lines, at)
            output, after = _output(lines, end + 1)
            not_run = directives.get("not-run", [None])[0]
            if not_run is not None and not not_run:
                problems.append("`not-run` without a reason")
            model = tuple(json.loads(text) for text in directives.get("model", []))
            found.append(Block(page, at + 1, code, not_run, model, output, tuple(problems)))
            end = after if output is not None else end
        at = end + 1
    return found


def _output(lines: list[str], at: int) -> tuple[str | None, int]:
    """The ```text block marked `<!-- output -->` after a block, if there is one, and its end."""
    while at < len(lines) and not lines[at].strip():
        at += 1
    if at + 1 >= len(lines) or not re.match(r"^\s*<!-- output -->\s*$", lines[at]):
        return None, at
    if FENCE.match(lines[at + 1]) is None or FENCE.match(lines[at + 1]).group(1) != "text":  # type: ignore[union-attr]
        return None, at
    end = next(i for i in range(at + 2, len(lines)) if FENCE.match(lines[i]))
    return "\n".join(lines[at + 2 : end]), end


BLOCKS = [block for page in PAGES for block in blocks(page)]


def _loose_directives(lines: list[str]) -> list[tuple[int, str]]:
    """`not-run` and `model` comments (1-based line, kind) with no ```bash block below them."""
    loose = []
    for number, line in enumerate(lines, 1):
        found = DIRECTIVE.match(line)
        if not found or found.group(1) == "output":
            continue
        below = number
        while below < len(lines) and DIRECTIVE.match(lines[below]):
            below += 1
        if below >= len(lines) or not re.match(r"^\s*```bash\s*$", lines[below]):
            loose.append((number, found.group(1)))
    return loose


def test_every_example_is_run_or_says_why_not() -> None:
    assert BLOCKS, "no ```bash block found"
    problems = [f"{block}: {problem}" for block in BLOCKS for problem in block.problems]
    orphans = [
        f"{page.relative_to(ROOT)}:{number}: a `{kind}` comment that is not just above a block"
        for page in PAGES
        for number, kind in _loose_directives(page.read_text(encoding="utf-8").split("\n"))
    ]
    assert problems + orphans == []


def fits(expected: str, printed: str) -> bool:
    """Whether the printed text is the expected one, line for line, `…` matching any text."""
    want, got = expected.strip("\n").split("\n"), printed.strip("\n").split("\n")
    patterns = [re.escape(line.rstrip()).replace("…", ".*") for line in want]
    return len(want) == len(got) and all(
        re.fullmatch(p, line.rstrip()) for p, line in zip(patterns, got, strict=True)
    )


def test_shown_output_must_match_line_for_line() -> None:
    assert fits("<<untrusted … from mcp>>\nHELLO", "<<untrusted 3f2a from mcp>>\nHELLO\n")
    assert not fits("HELLO", "hello")
    assert not fits("HELLO", "HELLO\nand more")
    assert not fits("Four.", "Four. And five.")


def answer(request: dict[str, Any]) -> Step:
    """Once a block's script is used up: the last tool result said back, else OK."""
    last = (request.get("messages") or [{}])[-1]
    if last.get("role") == "tool":
        return Step.reply(str(last.get("content")))
    return Step.reply("OK")


@pytest.fixture
def reader(tmp_path: Path, fake_llm: FakeOpenAI) -> dict[str, str]:
    """What a reader has after the Quick start: a clone with its .venv, an onboarded home."""
    clone = tmp_path / "nanomem"
    clone.mkdir()
    (clone / ".venv").symlink_to(sys.prefix)
    home = tmp_path / "home"
    onboard(
        Home(home / ".nanomem"),
        model="openai/gpt-4o-mini",
        api_base=fake_llm.base_url,
        api_key=TEST_KEY,
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOMEM_")}
    env.update(
        HOME=str(home),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        PWD=str(clone),
    )
    return env


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.not_run is None], ids=str)
def test_the_example_runs(block: Block, reader: dict[str, str], fake_llm: FakeOpenAI) -> None:
    for step in block.model:
        if isinstance(step, str):
            fake_llm.reply(step)
        else:
            fake_llm.tool_call(step["tool"], step["arguments"])
    fake_llm.set_fallback(answer)
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", block.code],
        cwd=reader["PWD"],
        env=reader,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{block}: exit {done.returncode}\n{done.stderr}"
    if block.output is not None:
        assert fits(block.output, done.stdout), (
            f"{block}: printed\n{done.stdout}\ninstead of\n{block.output}"
        )
