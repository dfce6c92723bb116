"""Model names checked offline before the first call (providers/model_names.py), through the real
CLI: a name without a provider stops the start and says what to write; with an api_base any
name goes to that server as it is, on both transports."""

from __future__ import annotations

import pytest

from nanomem.home import Home
from nanomem.providers.model_names import LITELLM_PROVIDERS, model_name_problem
from tests.conftest import cli_env, run_cli
from tests.fakes.openai_server import FakeOpenAI


@pytest.mark.parametrize(
    ("name", "advice"),
    [
        ("llama3.1", "`ollama/llama3.1`"),
        ("llama3.1:8b", "`openai/llama3.1:8b` and set llm.api_base"),
        ("claude-3-haiku", "`anthropic/claude-3-haiku`"),
        ("gemini-1.5-pro", "`gemini/gemini-1.5-pro`"),
        ("my-finetune", "`openai/my-finetune` with llm.api_base"),
        ("meta-llama/Llama-3.1-8B", "set llm.api_base"),
    ],
)
def test_a_name_no_client_can_place_says_what_to_write(name: str, advice: str) -> None:
    problem = model_name_problem(name, None)
    assert problem is not None and advice in problem and name in problem


@pytest.mark.parametrize(
    ("name", "api_base"),
    [
        ("openai/gpt-4o-mini", None),
        ("gpt-4o-mini", None),  # OpenAI's own bare names go to OpenAI, as litellm sends them
        ("o3-mini", None),
        ("anthropic/claude-sonnet-4-5", None),
        ("openrouter/meta-llama/llama-3.1-8b", None),
        ("ollama/llama3.1", None),
        ("llama3.1", "http://localhost:11434/v1"),  # a server of one's own names its models
        ("meta-llama/Llama-3.1-8B", "http://localhost:8000/v1"),
    ],
)
def test_names_a_client_can_place_pass(name: str, api_base: str | None) -> None:
    assert model_name_problem(name, api_base) is None


def test_the_prefix_table_is_litellms_own_list() -> None:
    import litellm

    listed = {getattr(p, "value", p) for p in litellm.provider_list}
    assert listed == LITELLM_PROVIDERS
    assert litellm.get_llm_provider("gpt-4o-mini")[1] == "openai"  # bare OpenAI names placed


def test_a_bare_name_stops_the_start_before_any_call(home: Home, fake_llm: FakeOpenAI) -> None:
    env = cli_env(home, fake_llm, NANOMEM_LLM__MODEL="llama3.1")
    del env["NANOMEM_LLM__API_BASE"]
    result = run_cli("chat", "-m", "hi", env=env)
    assert result.returncode == 2
    assert result.stderr.startswith("nanomem: config error: llm.model `llama3.1` names no")
    assert "`ollama/llama3.1`" in result.stderr and "`openai/llama3.1`" in result.stderr
    assert "(environment variable NANOMEM_LLM__MODEL)" in result.stderr
    assert fake_llm.requests == []
    status = run_cli("status", env=env)
    assert status.returncode == 0 and "`ollama/llama3.1`" in status.stdout


@pytest.mark.parametrize("transport", ["auto", "litellm"])
def test_with_an_api_base_a_bare_name_goes_to_the_server_unchanged(
    home: Home, fake_llm: FakeOpenAI, transport: str
) -> None:
    fake_llm.reply("hello from llama")
    env = cli_env(home, fake_llm, NANOMEM_LLM__MODEL="llama3.1", NANOMEM_LLM__TRANSPORT=transport)
    result = run_cli("chat", "-m", "hi", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "hello from llama"
    assert fake_llm.requests[0]["model"] == "llama3.1"
