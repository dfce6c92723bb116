"""The shell tool through the real CLI: whether a sandbox runs here, its settings, and what
the model saw."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nanomem.home import Home
from nanomem.tools.sandbox import decide
from tests.conftest import cli_env
from tests.fakes.openai_server import FakeOpenAI

SANDBOX_RUNS = decide("auto").binary is not None
NOBODY = 65534
ROOT = Path(__file__).resolve().parent.parent.parent


def shell_env(home: Home, fake_llm: FakeOpenAI, mode: str, **extra: str) -> dict[str, str]:
    settings = {
        "NANOMEM_TOOLS__SHELL_ENABLED": "true",
        "NANOMEM_TOOLS__SHELL_APPROVAL": "off",
        "NANOMEM_TOOLS__SHELL_SANDBOX": mode,
        "NANOMEM_TOOLS__SHELL_TIMEOUT_S": "60",
        "NANOMEM_LLM__TRANSPORT": "direct",  # litellm's import would only slow these down
    }
    return cli_env(home, fake_llm, **{**settings, **extra})


def shown(fake_llm: FakeOpenAI) -> str:
    """What the model was told the command printed."""
    return str(fake_llm.requests[1]["messages"][-1]["content"])


@contextlib.contextmanager
def as_nobody(tmp_path: Path) -> Iterator[tuple[list[str], dict[str, Any], Path]]:
    """How to start nanomem as `nobody` when the tests run as root (the kernel exempts root
    from some protections and limits): the interpreter prefix, Popen's arguments (with
    "env_extra" to add to its environment), and a home that user owns."""
    if os.geteuid() != 0:
        yield [sys.executable], {}, tmp_path / "own-home"
        return
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    python = shutil.which(version, path="/usr/bin:/usr/local/bin")
    if python is None:  # ours may sit under /root, where nobody may not go
        pytest.skip(f"no system {version} for an unprivileged nanomem")
    root = Path(tempfile.mkdtemp(prefix="nanomem-nobody-"))
    os.chown(root, NOBODY, NOBODY)
    path = f"{ROOT}:{sysconfig.get_paths()['purelib']}"
    options = {"user": NOBODY, "group": NOBODY, "extra_groups": [], "cwd": root}
    try:
        yield [python], {**options, "env_extra": {"PYTHONPATH": path}}, root / "home"
    finally:
        shutil.rmtree(root, ignore_errors=True)
