"""Shared fixtures: a temp home, the loopback model server, the real CLI in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nanomem.app import App, build_app
from nanomem.config import Settings, load_settings
from nanomem.home import Home
from nanomem.onboard import onboard
from nanomem.providers.scripted import ScriptedProvider
from tests.fakes.openai_server import FakeOpenAI

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
NANOMEM = [sys.executable, "-m", "nanomem"]
TEST_KEY = "sk-test-very-secret-key-0123456789"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may pick up the developer's own configuration."""
    for name in list(os.environ):
        if name.startswith("NANOMEM_"):
            monkeypatch.delenv(name)


@pytest.fixture(autouse=True)
def _secrets_of_this_test_only() -> Iterator[None]:
    """Secrets a test registers (process-wide, as in the product) end with it."""
    from nanomem import log

    kept = list(log._secrets)
    yield
    log._secrets[:] = kept


@pytest.fixture
def home(tmp_path: Path) -> Home:
    home = Home(tmp_path / "home")
    onboard(home)
    return home


@pytest.fixture
def fake_llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def settings_for(home: Home, **sections: dict[str, object]) -> Settings:
    overrides: dict[str, dict[str, object]] = {"llm": {"model": "openai/fake"}}
    for section, values in sections.items():
        overrides.setdefault(section, {}).update(values)
    return load_settings(home.config, overrides)


def make_app(home: Home, provider: ScriptedProvider, **sections: dict[str, object]) -> App:
    return build_app(settings_for(home, **sections), home, provider=provider)


def cli_env(home: Home, server: FakeOpenAI | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOMEM_")}
    env.update(NANOMEM_HOME=str(home.root), LITELLM_LOCAL_MODEL_COST_MAP="True")
    if server is not None:
        env.update(
            NANOMEM_LLM__MODEL="openai/fake",
            NANOMEM_LLM__API_BASE=server.base_url,
            NANOMEM_LLM__API_KEY=TEST_KEY,
            NANOMEM_LLM__TIMEOUT_S="10",
        )
    env.update(extra)
    return env


def run_cli(
    *args: str, env: dict[str, str], stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*NANOMEM, *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
