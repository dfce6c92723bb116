"""`nanomem chat` in a pseudo-terminal: what a person at a keyboard sees."""

import json
import sys
from typing import Any

import pexpect

from nanomem.home import Home
from nanomem.memory.session import session_filename
from tests.conftest import cli_env
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import WAIT_S, wait_until
from tests.helpers.terminal import PROMPT


def test_a_reply_is_shown_with_tool_progress(chat: pexpect.spawn, fake_llm: FakeOpenAI) -> None:
    fake_llm.tool_call("list_dir", {"path": "memory"})
    fake_llm.reply("Your memory folder holds **MEMORY.md**.")
    chat.sendline("what is in memory?")
    chat.expect_exact("list_dir(path='memory')")
    chat.expect_exact("Your memory folder holds")
    chat.expect_exact("MEMORY.md")
    chat.expect_exact(PROMPT)


def test_a_sent_file_is_shown_where_it_lies_with_its_caption(
    chat: pexpect.spawn, fake_llm: FakeOpenAI, home: Home
) -> None:
    (home.workspace / "reports").mkdir()
    (home.workspace / "reports" / "plants.csv").write_text("basil,18:00\n")
    fake_llm.tool_call("send_file", {"path": "reports/plants.csv", "caption": "your watering plan"})
    fake_llm.reply("It is in the file above.")
    chat.sendline("send me the plan")
    chat.expect_exact(f"📎 {home.workspace / 'reports' / 'plants.csv'}")
    chat.expect_exact("your watering plan")
    chat.expect_exact("It is in the file above.")
    chat.expect_exact(PROMPT)
    tool = [m for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert tool[-1]["content"].startswith("sent plants.csv (12 bytes) to the chat")


def test_ctrl_c_cancels_a_slow_turn_and_the_prompt_returns(
    chat: pexpect.spawn, fake_llm: FakeOpenAI, home: Home
) -> None:
    fake_llm.reply("far too late", latency=30)
    chat.sendline("take your time")
    chat.expect_exact("thinking")
    chat.sendcontrol("c")
    chat.expect_exact("cancelled")
    chat.expect_exact(PROMPT)
    fake_llm.reply("a quick answer")
    chat.sendline("and now?")
    chat.expect_exact("a quick answer")
    chat.expect_exact(PROMPT)
    lines = (home.sessions / session_filename("cli:direct")).read_text().splitlines()
    roles = [json.loads(line).get("role") for line in lines[1:]]
    assert roles == ["user", "user", "assistant"]


def test_ctrl_d_exits_cleanly(chat: pexpect.spawn) -> None:
    chat.sendcontrol("d")
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 0


def test_ctrl_c_on_an_empty_prompt_exits(chat: pexpect.spawn) -> None:
    chat.sendcontrol("c")
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 0


def test_ctrl_c_clears_a_half_typed_line(chat: pexpect.spawn, fake_llm: FakeOpenAI) -> None:
    chat.send("never mind this")
    chat.sendcontrol("c")
    chat.sendline("hello")
    chat.expect_exact("echo: ")
    chat.expect_exact(PROMPT)
    last = fake_llm.requests[-1]["messages"][-1]["content"]
    assert last.endswith("\n\nhello")


def test_unknown_command_is_answered_without_the_model(
    chat: pexpect.spawn, fake_llm: FakeOpenAI
) -> None:
    chat.sendline("/nope")
    chat.expect_exact("Unknown command /nope")
    chat.expect_exact(PROMPT)
    assert fake_llm.requests == []
    chat.sendline("nope")  # control: a message does reach the model
    chat.expect_exact("echo: ")
    chat.expect_exact(PROMPT)
    assert len(fake_llm.requests) == 1


def test_pasted_lines_and_esc_enter_stay_in_one_message(
    chat: pexpect.spawn, fake_llm: FakeOpenAI
) -> None:
    chat.send("\x1b[200~first line\nsecond line\x1b[201~")  # a bracketed paste
    chat.send("\x1b\r")  # Esc+Enter: a newline, not a submit
    chat.send("third line\r")
    chat.expect_exact("echo: ")
    chat.expect_exact(PROMPT)
    assert len(fake_llm.requests) == 1
    assert fake_llm.requests[0]["messages"][-1]["content"].endswith(
        "\n\nfirst line\nsecond line\nthird line"
    )


def spawn_chat(env: dict[str, str]) -> pexpect.spawn:
    return pexpect.spawn(
        sys.executable, ["-m", "nanomem", "chat"], env=env, encoding="utf-8", timeout=WAIT_S
    )


def test_first_run_onboards_interactively(tmp_path, fake_llm: FakeOpenAI) -> None:  # type: ignore[no-untyped-def]
    home = Home(tmp_path / "new-home")
    env = cli_env(home, fake_llm, TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1")
    del env["NANOMEM_LLM__MODEL"], env["NANOMEM_LLM__API_KEY"]  # asked for: no one gave them
    child = spawn_chat(env)
    child.expect_exact("Model (e.g. openai/gpt-4o-mini; empty to set later):")
    child.sendline("openai/fake")
    child.expect_exact("API key")
    child.sendline("sk-typed-at-the-prompt")
    child.expect_exact(PROMPT)
    config = home.config.read_text()
    assert 'model = "openai/fake"' in config and 'api_key = "sk-typed-at-the-prompt"' in config
    child.sendline("hello")
    child.expect_exact("echo: ")
    child.expect_exact(PROMPT)  # a Ctrl-D typed before the prompt is back would be lost
    child.sendcontrol("d")
    child.expect(pexpect.EOF)


def test_a_missing_model_is_asked_for_and_saved(home: Home, fake_llm: FakeOpenAI) -> None:
    env = cli_env(home, fake_llm, TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1")
    del env["NANOMEM_LLM__MODEL"]
    child = spawn_chat(env)
    child.expect_exact("NANOMEM_LLM__MODEL")
    child.expect_exact("Model to use now")
    child.sendline("openai/fake")
    child.expect_exact(PROMPT)
    assert 'model = "openai/fake"' in home.config.read_text()
    child.sendcontrol("d")
    child.expect(pexpect.EOF)


STORY = " ".join(f"Sentence number {n} of a long streamed answer." for n in range(12))


def test_a_reply_grows_on_screen_and_ctrl_c_keeps_what_was_shown(
    chat: pexpect.spawn, fake_llm: FakeOpenAI, home: Home
) -> None:
    fake_llm.reply(STORY, pieces=12, hold_after=6)  # half of it, then the model waits
    chat.sendline("tell me a story")
    chat.expect_exact("Sentence number 1 of a long")  # on screen before the reply ended
    assert fake_llm.streams_finished == 0
    chat.sendcontrol("c")
    chat.expect_exact("cancelled")
    chat.expect_exact(PROMPT)
    fake_llm.release()
    path = home.sessions / session_filename("cli:direct")

    def last() -> Any:
        return json.loads(path.read_text().splitlines()[-1])

    # /stop answers once it has cancelled the turn; the turn saves what was shown as it ends.
    kept = wait_until(lambda: (m := last())["role"] == "assistant" and m, what="the kept reply")
    assert kept["role"] == "assistant" and kept["interrupted"] is True
    assert kept["content"].startswith("Sentence number 0 of a long streamed answer.")
    assert len(kept["content"]) < len(STORY)  # what was shown, not the whole story


def test_an_interactive_chat_takes_a_session_name_not_a_whole_key(
    home: Home, fake_llm: FakeOpenAI
) -> None:
    env = cli_env(home, fake_llm, TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1")
    child = pexpect.spawn(
        sys.executable,
        ["-m", "nanomem", "chat", "--session", "telegram:42"],
        env=env,
        encoding="utf-8",
        timeout=30,
    )
    child.expect_exact("whole keys (telegram:123) go with -m")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1


def test_ctrl_d_typed_while_a_reply_draws_exits_after_it(
    chat: pexpect.spawn, fake_llm: FakeOpenAI
) -> None:
    fake_llm.reply("A slow answer, finally.", pieces=2, hold_after=1)
    chat.sendline("take your time")
    chat.expect_exact("thinking")  # the reply is on its way
    chat.sendcontrol("d")  # typed ahead: the reply goes on, then the chat ends
    fake_llm.release()
    chat.expect_exact("finally.")
    chat.expect_exact("bye")
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 0


def test_typeahead_waits_for_the_prompt_and_leaves_no_residue(
    chat: pexpect.spawn, fake_llm: FakeOpenAI
) -> None:
    fake_llm.reply("First answer, at last.", pieces=2, hold_after=1)
    chat.sendline("one")
    chat.expect_exact("thinking")
    chat.send("two, typed ahead")
    fake_llm.release()
    chat.expect_exact("at last.")
    assert "typed ahead" not in chat.before  # not echoed over the spinner or the reply
    chat.expect_exact(PROMPT)
    chat.expect_exact("two, typed ahead")  # it waits at the prompt, as typed
    chat.send("\r")
    chat.expect_exact("echo: ")
    chat.expect_exact(PROMPT)
    assert fake_llm.requests[-1]["messages"][-1]["content"].endswith("two, typed ahead")
