"""Shared helpers for the benchmark scripts: paths, the real app on a temp home, tables.

Importing this module first puts the repository root on sys.path and keeps litellm offline,
so each script can be run as `python tests/benchmarks/<name>.py` from anywhere.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
for _name in [n for n in os.environ if n.startswith("NANOMEM_")]:
    del os.environ[_name]  # the developer's own configuration must not leak in

from nanomem.app import App, build_app  # noqa: E402
from nanomem.cli.onboard import onboard  # noqa: E402
from nanomem.config import load_settings  # noqa: E402
from nanomem.home import Home  # noqa: E402
from nanomem.log import setup_logging  # noqa: E402
from nanomem.providers.provider import Provider  # noqa: E402

PYTHON = REPO / ".venv" / "bin" / "python"
API_KEY = "sk-bench"


def new_home(root: Path) -> Home:
    home = Home(root / "home")
    onboard(home)
    return home


def make_app(
    home: Home, base_url: str, provider: Provider | None = None, **sections: dict[str, Any]
) -> App:
    """The real stack (litellm provider unless one is given) against the fake server."""
    overrides: dict[str, dict[str, Any]] = {
        "llm": {"model": "openai/fake", "api_base": base_url, "api_key": API_KEY}
    }
    for section, values in sections.items():
        overrides.setdefault(section, {}).update(values)
    settings = load_settings(home.config, overrides)
    setup_logging(settings.log.level, home.logs, stderr_level="ERROR")  # as `nanomem chat` does
    return build_app(settings, home, provider)


def gateway_env(home: Path, model_url: str, **settings: str) -> dict[str, str]:
    """The environment of a `nanomem gateway` subprocess on `home` against the fake model,
    default settings otherwise (no scheduled Dream: it would take the model's time)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOMEM_")}
    env.update(
        NANOMEM_HOME=str(home),
        NANOMEM_LLM__MODEL="openai/fake",
        NANOMEM_LLM__API_BASE=model_url,
        NANOMEM_LLM__API_KEY=API_KEY,
        NANOMEM_GATEWAY__PORT="0",
        NANOMEM_DREAM__ENABLED="false",
        **settings,
    )
    return env


def _is_litellm_worker(task: asyncio.Task[Any]) -> bool:
    return getattr(task.get_coro(), "__qualname__", "").startswith("LoggingWorker.")


async def settle(before: set[asyncio.Task[Any]]) -> None:
    """Wait for the background work started since `before` was taken (after-turn hooks,
    litellm's deferred success logging, worked off from a queue by a long-lived task), so
    its CPU is charged to the turn that caused it, not to whatever runs next."""
    from litellm.litellm_core_utils.logging_worker import GLOBAL_LOGGING_WORKER

    me = asyncio.current_task()
    while True:
        await GLOBAL_LOGGING_WORKER.flush()
        busy = [
            task
            for task in asyncio.all_tasks() - before
            if task is not me and not task.done() and not _is_litellm_worker(task)
        ]
        if not busy:
            return
        await asyncio.wait(busy)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def median(values: list[float]) -> float:
    return statistics.median(values)


def table(headers: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


class ModelServer:
    """The loopback fake model in a process of its own, as a real model server would be:
    its CPU is not charged to the process under measurement."""

    def __init__(self, latency: float = 0.0, *, schema_model: bool = False) -> None:
        self.latency = latency
        self.base_url = ""
        self._process: subprocess.Popen[str] | None = None
        # Answers as a model would (tools called when asked, response_format filled).
        self._behaviour = ["--schema-model"] if schema_model else []

    def __enter__(self) -> ModelServer:
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.fakes.openai_server",
                "--latency",
                str(self.latency),
                *self._behaviour,
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        self.base_url = self._process.stdout.readline().strip()
        return self

    def drain(self) -> tuple[list[int], float]:
        """Since the last drain: how many messages each request carried (oldest first), and
        the seconds the server spent handling them (the fake model's own share)."""
        request = urllib.request.Request(f"{self.base_url}/_drain", method="POST")
        with urllib.request.urlopen(request, timeout=10) as resp:
            drained = json.loads(resp.read())
        return [size["messages"] for size in drained["requests"]], drained["busy_seconds"]

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)
