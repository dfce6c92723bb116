"""Every ```python block of README.md and docs/api.md runs for real, in a Python process of its
own, against the agent API served with the model-like fake, so the client examples cannot
drift: `http://127.0.0.1:18790/v1` and `YOUR-API-KEY` become the served gateway's. The model
calls a tool named `weather` whenever a client offers one, as a person's question would make
a real model do."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest

from tests.fakes.schema_model import SchemaModel
from tests.helpers import WAIT_S
from tests.helpers.clients import VALUES, Agent

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "docs" / "api.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.M | re.S)
EXAMPLE_URL, EXAMPLE_KEY = "http://127.0.0.1:18790/v1", "YOUR-API-KEY"


def examples() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((f"{page.relative_to(ROOT)}:{line}", match.group(1)))
    return found


def test_the_pages_have_examples_for_every_client() -> None:
    code = "\n".join(block for _where, block in examples())
    for client in (
        "from openai",
        "pydantic_ai",
        "langchain_openai",
        "litellm",
        "instructor",
        "agents",
    ):
        assert client in code


@pytest.mark.parametrize(("where", "code"), examples(), ids=[w for w, _c in examples()])
async def test_the_example_runs(agent: Agent, where: str, code: str, tmp_path: Path) -> None:
    agent.model.set_fallback(SchemaModel(VALUES, unasked={"weather"}))
    code = code.replace(EXAMPLE_URL, agent.base).replace(EXAMPLE_KEY, agent.key)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), WAIT_S)
    assert process.returncode == 0, f"{where}: exit {process.returncode}\n{err.decode()[-3000:]}"
    assert agent.model.requests, f"{where}: the model was never asked"
    if "def weather" in code:  # the client's tool ran, and its result came back through the turn
        assert "tool said: sunny" in out.decode(), f"{where} printed\n{out.decode()}"
