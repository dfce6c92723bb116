"""Background tasks in the terminal (`nanomem chat` in a pseudo-terminal) and the one-shot
(`nanomem chat -m`), against the loopback model: the terminal shows a result above the prompt
while the person goes on chatting; the one-shot waits for its tasks and prints their results."""

from __future__ import annotations

import re

import pexpect
import pytest

from nanomem.home import Home
from tests.conftest import cli_env, run_cli
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import wait_until
from tests.helpers.tasks import task_id, tasks_model
from tests.helpers.terminal import PROMPT

pytestmark = pytest.mark.slow


def test_the_terminal_shows_a_result_above_the_prompt(
    chat: pexpect.spawn, fake_llm: FakeOpenAI
) -> None:
    fake_llm.set_fallback(tasks_model)
    chat.sendline("SPAWN sums: HOLD add the numbers")
    chat.expect(r"started task ([0-9a-f]{4})")
    job = chat.match.group(1)
    chat.expect_exact(PROMPT)
    wait_until(lambda: fake_llm.held == 1, what="the task at the model")
    chat.sendline("and meanwhile?")  # the chat goes on while the task runs
    chat.expect_exact("chat answer to and meanwhile?")
    chat.expect_exact(PROMPT)
    chat.send("half a li")  # being typed when the result comes
    chat.expect_exact("half a li")
    fake_llm.release()
    chat.expect_exact(f"task {job} (sums) done · 1 step · 12.4k tokens")
    chat.expect_exact("found: HOLD add the numbers")
    chat.expect_exact(PROMPT)  # drawn again below it, with what was typed so far
    chat.sendline("ne")
    chat.expect_exact("chat answer to half a line")
    chat.expect_exact(PROMPT)
    chat.sendline("/tasks")
    chat.expect(rf"{job}  done \d+ s ago · 1 step · 12.4k tokens  sums")


def test_the_one_shot_waits_for_its_tasks_and_prints_their_results(
    home: Home, fake_llm: FakeOpenAI
) -> None:
    fake_llm.set_fallback(tasks_model)
    done = run_cli("chat", "-m", "SPAWN sums: add the numbers", env=cli_env(home, fake_llm))
    assert done.returncode == 0, done.stderr
    job = task_id(done.stdout)
    assert f"\ntask {job} (sums) done" in done.stdout, done.stdout + done.stderr
    reply, result = done.stdout.split(f"\ntask {job} (sums) done", 1)
    assert reply.startswith(f"chat: started task {job} (sums).")
    assert result.startswith(" · 1 step · 12.4k tokens\n\nfound: add the numbers")
    assert "waiting for 1 background task(s)" in done.stderr
    assert re.search(
        rf"{job}  done", run_cli("chat", "-m", "/tasks", env=cli_env(home, fake_llm)).stdout
    )
