"""What `nanomem chat -m` says when the model cannot answer, one category at a time against the
loopback model: the URL it tried (the provider's default when llm.api_base is unset; never a
password), where the log is, and what to do next (/retry, `nanomem doctor`)."""

from __future__ import annotations

import socket

import pytest

from nanomem.home import Home, shown_path
from tests.conftest import TEST_KEY, cli_env, run_cli_here
from tests.fakes.openai_server import FakeOpenAI

RETRY = "Send /retry to try again; `nanomem doctor` checks the connection"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def said(home: Home, **env: str) -> str:
    """The one-shot's error line (it fails: exit 1, nothing on stdout)."""
    result = run_cli_here(
        "chat", "-m", "hi", env=cli_env(home, NANOMEM_LLM__MAX_RETRIES="0", **env)
    )
    assert result.returncode == 1 and result.stdout == ""
    return result.stderr.strip()


def test_an_unreachable_server_is_named_without_its_password(home: Home) -> None:
    port = closed_port()
    base = f"http://me:pass-word-123@127.0.0.1:{port}/v1"
    line = said(home, NANOMEM_LLM__MODEL="openai/fake", NANOMEM_LLM__API_BASE=base)
    log = shown_path(home.logs / "nanomem.log")
    assert line == (
        f"nanomem: I could not reach the model service at http://127.0.0.1:{port}/v1. "
        f"Check the network or `llm.api_base`. {RETRY}; the details are in {log}."
    )
    assert "pass-word-123" not in line


def test_the_default_base_is_named_when_api_base_was_never_set(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OLLAMA_API_BASE", raising=False)
    line = said(home, NANOMEM_LLM__MODEL="ollama/llama3")  # its default: this machine
    assert line.startswith(
        "nanomem: I could not reach the model service at http://localhost:11434/v1. "
    )
    for env in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE"):
        monkeypatch.delenv(env, raising=False)
    line = said(home, NANOMEM_LLM__MODEL="openai/gpt-4o-mini")  # refused before it is sent
    assert line == (
        "nanomem: The model service at https://api.openai.com/v1 needs an API key, and no key "
        "is set (`llm.api_key`, or OPENAI_API_KEY). `nanomem doctor` checks the setup."
    )


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (401, "refused the API key. It came from the environment variable NANOMEM_LLM__API_KEY."),
        (404, "does not know the model `openai/fake`. Check `llm.model`;"),
    ],
)
def test_a_refused_key_and_an_unknown_model(home: Home, status: int, expected: str) -> None:
    with FakeOpenAI() as llm:
        llm.error(status, f"no, {TEST_KEY}")
        line = said(home, **_llm(llm))
    assert line.startswith(f"nanomem: The model service at {llm.base_url} {expected}")
    assert "`nanomem doctor` checks the setup" in line
    assert TEST_KEY not in line


def test_a_silent_model(home: Home) -> None:
    with FakeOpenAI() as llm:
        llm.hang(10)
        line = said(home, **_llm(llm), NANOMEM_LLM__TIMEOUT_S="1")
    assert line.startswith(
        f"nanomem: The model at {llm.base_url} took too long to answer (timed out). {RETRY}"
    )


def _llm(llm: FakeOpenAI) -> dict[str, str]:
    return {
        "NANOMEM_LLM__MODEL": "openai/fake",
        "NANOMEM_LLM__API_BASE": llm.base_url,
        "NANOMEM_LLM__API_KEY": TEST_KEY,
    }
