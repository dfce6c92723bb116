"""Bad bytes cost no message and no reply: the real `nanomem chat -m` in a subprocess, over
real HTTP to the loopback model, on both transports (litellm and the direct client)."""

from __future__ import annotations

import json
import subprocess

import pytest

from nanomem.home import Home
from nanomem.memory.session import SessionStore, session_filename
from tests.conftest import NANOMEM, cli_env, run_cli, run_cli_here
from tests.fakes.openai_server import FakeOpenAI

TRANSPORTS = ["litellm", "direct"]
# A reply whose JSON carries a lone high surrogate, as some models and proxies send it.
SURROGATE_REPLY = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "fake",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "half an emoji: @ and more"},
                "finish_reason": "stop",
            }
        ],
    }
).replace("@", "\\ud83d")


def session_records(home: Home, key: str = "cli:direct") -> list[dict[str, object]]:
    raw = (home.sessions / session_filename(key)).read_bytes()
    return [json.loads(line) for line in raw.decode("utf-8").splitlines()]  # strict UTF-8


async def loaded(home: Home, key: str = "cli:direct") -> list[dict[str, object]]:
    session = await SessionStore(home.sessions).get(key)
    assert session.created_at, "the session file has no header"
    return session.messages


async def test_non_utf8_stdin_gets_a_reply_and_a_session_with_its_header(
    home: Home, fake_llm: FakeOpenAI
) -> None:
    fake_llm.reply("got it")
    result = subprocess.run(
        [*NANOMEM, "chat", "-m", "-"],
        env=cli_env(home, fake_llm),
        input=b"caf\xe9 \xff\xfe costs 5\x80",
        capture_output=True,
        timeout=60,
        check=False,
    )
    stderr = result.stderr.decode("utf-8", "replace")
    assert result.returncode == 0, stderr
    assert result.stdout == b"got it\n"
    assert "Traceback" not in stderr
    assert stderr.count("not valid UTF-8") == 1
    cleaned = "caf\ufffd \ufffd\ufffd costs 5\ufffd"
    assert fake_llm.requests[0]["messages"][-1]["content"].endswith(cleaned)
    records = session_records(home)
    assert records[0]["_type"] == "session"
    messages = await loaded(home)
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert str(messages[0]["content"]).endswith(cleaned)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_reply_with_a_lone_surrogate_is_saved_and_printed(
    home: Home, fake_llm: FakeOpenAI, transport: str
) -> None:
    fake_llm.raw(SURROGATE_REPLY)  # a whole JSON body: the non-streaming path
    # (a surrogate arriving in a stream is tests/providers/test_streaming.py's)
    env = cli_env(home, fake_llm, NANOMEM_LLM__TRANSPORT=transport, NANOMEM_LLM__STREAM="false")
    result = run_cli("chat", "-m", "send half an emoji", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "half an emoji: \ufffd and more\n"
    assert "Traceback" not in result.stderr
    messages = await loaded(home)
    assert messages[-1] == {**messages[-1], "role": "assistant"}
    assert messages[-1]["content"] == "half an emoji: \ufffd and more"
    # The next turn replays the saved reply: nothing in the session is unsendable.
    fake_llm.reply("still here")
    again = run_cli("chat", "-m", "and now?", env=env)
    assert again.stdout == "still here\n", again.stderr
    assert fake_llm.requests[-1]["messages"][-2]["content"] == "half an emoji: \ufffd and more"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_lone_surrogate_in_tool_call_arguments_is_written_cleanly(
    home: Home, fake_llm: FakeOpenAI, transport: str
) -> None:
    # A lone surrogate inside the arguments text (the body's JSON escapes it as "\\ud83d").
    fake_llm.tool_call("write_file", '{"path": "note.md", "content": "smile \ud83d!"}')
    fake_llm.reply("written")
    env = cli_env(home, fake_llm, NANOMEM_LLM__TRANSPORT=transport)
    result = run_cli("chat", "-m", "write a note", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "written\n"
    assert (home.workspace / "note.md").read_bytes().decode("utf-8") == "smile \ufffd!"
    calls = [m for m in await loaded(home) if m.get("tool_calls")]
    assert json.loads(calls[0]["tool_calls"][0]["function"]["arguments"])["content"] == (
        "smile \ufffd!"
    )


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("body", ['{"choices": []}', '{"choices": [{"index": 0}]}', "<html>"])
def test_an_empty_or_malformed_response_is_retried(
    home: Home, fake_llm: FakeOpenAI, transport: str, body: str
) -> None:
    fake_llm.raw(body)
    fake_llm.reply("second time lucky")
    env = cli_env(home, fake_llm, NANOMEM_LLM__TRANSPORT=transport)
    result = run_cli_here("chat", "-m", "hi", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "second time lucky\n"
    assert len(fake_llm.requests) == 2
    assert "Traceback" not in result.stderr
