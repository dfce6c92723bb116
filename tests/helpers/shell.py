"""The shell tool through the real CLI: whether a sandbox runs here, its settings, and what
the model saw."""

from __future__ import annotations

from nanomem.home import Home
from nanomem.tools.sandbox import decide
from tests.conftest import cli_env
from tests.fakes.openai_server import FakeOpenAI

SANDBOX_RUNS = decide("auto").binary is not None


def shell_env(home: Home, fake_llm: FakeOpenAI, mode: str, **extra: str) -> dict[str, str]:
    return cli_env(
        home,
        fake_llm,
        NANOMEM_TOOLS__SHELL_ENABLED="true",
        NANOMEM_TOOLS__SHELL_APPROVAL="off",
        NANOMEM_TOOLS__SHELL_SANDBOX=mode,
        NANOMEM_TOOLS__SHELL_TIMEOUT_S="60",
        NANOMEM_LLM__TRANSPORT="direct",  # litellm's import would only slow these down
        **extra,
    )


def shown(fake_llm: FakeOpenAI) -> str:
    """What the model was told the command printed."""
    return str(fake_llm.requests[1]["messages"][-1]["content"])
