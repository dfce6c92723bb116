"""Which path a model takes (providers/routing.py), the key's source, onboarding's comments,
and `nanomem status` naming the path through the real CLI."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from nanomem.cli.onboard import onboard
from nanomem.config import LLMSettings, load_settings
from nanomem.home import Home
from nanomem.providers.routing import key_source, route
from tests.conftest import cli_env, run_cli_here


@pytest.fixture(autouse=True)
def _no_provider_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_BASE_URL", "OPENAI_API_BASE", "OPENROUTER_API_BASE", "OLLAMA_API_BASE"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("model", "api_base", "path", "base", "sent"),
    [
        ("openai/gpt-4o-mini", None, "direct", "https://api.openai.com/v1", "gpt-4o-mini"),
        ("openai/llama3", "http://h:8000/v1/", "direct", "http://h:8000/v1", "llama3"),
        ("gpt-4o", None, "direct", "https://api.openai.com/v1", "gpt-4o"),
        (
            "openrouter/anthropic/claude-3.5",
            None,
            "direct",
            "https://openrouter.ai/api/v1",
            "anthropic/claude-3.5",
        ),
        ("deepseek/deepseek-chat", None, "direct", "https://api.deepseek.com/v1", "deepseek-chat"),
        ("groq/llama-3.1-8b", None, "direct", "https://api.groq.com/openai/v1", "llama-3.1-8b"),
        ("ollama/llama3.1", None, "direct", "http://localhost:11434/v1", "llama3.1"),
        ("ollama/llama3.1", "http://box:11434", "direct", "http://box:11434/v1", "llama3.1"),
        ("lm_studio/qwen", None, "direct", "http://localhost:1234/v1", "qwen"),
        ("hosted_vllm/m", "http://gpu/v1", "direct", "http://gpu/v1", "m"),
        ("meta-llama/Llama-3", "http://h/v1", "direct", "http://h/v1", "meta-llama/Llama-3"),
        ("anthropic/claude-sonnet-4-5", None, "litellm", "", "anthropic/claude-sonnet-4-5"),
        ("gemini/gemini-2.0-flash", None, "litellm", "", "gemini/gemini-2.0-flash"),
        ("bedrock/anthropic.claude", None, "litellm", "", "bedrock/anthropic.claude"),
        ("vertex_ai/gemini-pro", None, "litellm", "", "vertex_ai/gemini-pro"),
        ("anthropic/claude", "http://proxy/v1", "litellm", "", "anthropic/claude"),
        ("claude-3-haiku", None, "litellm", "", "claude-3-haiku"),
    ],
)
def test_auto_routes_each_model(
    model: str, api_base: str | None, path: str, base: str, sent: str
) -> None:
    chosen = route(LLMSettings(model=model, api_base=api_base))
    assert (chosen.path, chosen.base_url, chosen.model) == (path, base, sent)
    assert chosen.reason


def test_openai_itself_needs_a_key_and_max_completion_tokens() -> None:
    hosted = route(LLMSettings(model="openai/gpt-5"))
    local = route(LLMSettings(model="openai/x", api_base="http://127.0.0.1:9/v1"))
    assert (hosted.needs_key, hosted.max_tokens_field) == (True, "max_completion_tokens")
    assert (local.needs_key, local.max_tokens_field) == (False, "max_tokens")


def test_an_explicit_transport_wins() -> None:
    assert route(LLMSettings(model="openai/x", transport="litellm")).path == "litellm"
    forced = route(LLMSettings(model="anthropic/x", api_base="http://h/v1", transport="direct"))
    assert forced.path == "direct" and forced.base_url == "http://h/v1"


@pytest.fixture
def no_proxy_set(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No proxy variable from the machine running the tests."""
    for name in ("https_proxy", "http_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    return monkeypatch


def test_auto_keeps_the_lean_client_behind_an_http_proxy_and_says_so(
    no_proxy_set: pytest.MonkeyPatch,
) -> None:
    monkeypatch = no_proxy_set
    hosted = LLMSettings(model="openai/gpt-4o-mini")
    local = LLMSettings(model="openai/llama3", api_base="http://127.0.0.1:8000/v1")
    lan = LLMSettings(model="openai/llama3", api_base="http://gpu-box:8000/v1")
    assert route(hosted).proxy == "" and "proxy" not in route(hosted).describe()  # control

    monkeypatch.setenv("HTTPS_PROXY", "http://me:s3cret@proxy.example:3128")
    behind = route(hosted)
    assert behind.path == "direct" and behind.proxy == "http://proxy.example:3128"
    assert "through the proxy at http://proxy.example:3128" in behind.describe()
    assert "s3cret" not in behind.describe() and "s3cret" not in repr(behind)
    assert route(local).proxy == ""  # loopback is never proxied
    assert route(lan).proxy == ""  # an http:// server: HTTPS_PROXY does not apply
    monkeypatch.setenv("http_proxy", "http://proxy.example:3128")
    assert route(lan).path == "direct" and route(lan).proxy == "http://proxy.example:3128"
    monkeypatch.setenv("NO_PROXY", "gpu-box,api.openai.com")
    assert route(lan).proxy == "" and route(hosted).proxy == ""


def test_a_socks_proxy_keeps_the_lean_client_and_says_so(
    no_proxy_set: pytest.MonkeyPatch,
) -> None:
    monkeypatch = no_proxy_set
    monkeypatch.setenv("ALL_PROXY", "socks5://me:s3cret@127.0.0.1:1080")
    hosted = LLMSettings(model="openai/gpt-4o-mini")
    socks = route(hosted)
    assert socks.path == "direct" and socks.proxy == "socks5://127.0.0.1:1080"
    assert "through the proxy at socks5://127.0.0.1:1080" in socks.describe()
    assert "s3cret" not in socks.describe() and "s3cret" not in repr(socks)


def test_a_proxy_the_lean_client_does_not_speak_sends_auto_through_litellm(
    no_proxy_set: pytest.MonkeyPatch,
) -> None:
    monkeypatch = no_proxy_set
    monkeypatch.setenv("ALL_PROXY", "socks4://me:s3cret@127.0.0.1:1080")
    hosted = LLMSettings(model="openai/gpt-4o-mini")
    socks = route(hosted)
    assert socks.path == "litellm" and "ALL_PROXY is a socks4:// proxy" in socks.reason
    assert "s3cret" not in socks.describe()
    forced = route(hosted.model_copy(update={"transport": "direct"}))
    assert forced.path == "direct" and forced.proxy == ""  # an explicit choice stands
    assert "not through ALL_PROXY" in forced.describe()


def test_the_key_source_names_the_routed_providers_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("TOGETHERAI_API_KEY", "OPENROUTER_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    together = LLMSettings(model="together_ai/llama")
    assert key_source(together) == "no key is set (`llm.api_key`, or TOGETHERAI_API_KEY)"
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or")
    router = LLMSettings(model="openrouter/x/y")
    assert key_source(router) == "the environment variable OPENROUTER_API_KEY"


def no_values(table: dict[str, object]) -> bool:
    return all(isinstance(value, dict) and no_values(value) for value in table.values())


def test_onboarding_writes_unchosen_settings_as_comments(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    onboard(home, model="openai/gpt-4o-mini", api_key="sk-abc")
    text = home.config.read_text()
    data = tomllib.loads(text)
    assert data["llm"] == {"model": "openai/gpt-4o-mini", "api_key": "sk-abc"}
    # No value outside [llm]; tables within tables ([tools.web]) hold none either.
    assert all(no_values(values) for section, values in data.items() if section != "llm")
    assert '# transport = "auto"' in text and "# max_tokens = 4096" in text
    settings = load_settings(home.config)
    assert settings.llm.transport == "auto"
    bare = Home(tmp_path / "bare")
    onboard(bare)
    assert tomllib.loads(bare.config.read_text())["llm"] == {}


def status(home: Home, **env: str) -> str:
    result = run_cli_here("status", env=cli_env(home, None, **env))
    assert result.returncode == 0, result.stderr
    return next(line for line in result.stdout.splitlines() if line.startswith("model path"))


def test_status_names_the_path_and_why(home: Home) -> None:
    local = status(home, NANOMEM_LLM__MODEL="openai/m", NANOMEM_LLM__API_BASE="http://h:1/v1")
    assert "lean client (direct) to http://h:1/v1" in local and "llm.api_base" in local
    claude = status(home, NANOMEM_LLM__MODEL="anthropic/claude-sonnet-4-5")
    assert "litellm" in claude and "anthropic/ needs litellm's translation" in claude
    forced = status(home, NANOMEM_LLM__MODEL="openai/m", NANOMEM_LLM__TRANSPORT="litellm")
    assert "litellm: llm.transport = litellm" in forced
