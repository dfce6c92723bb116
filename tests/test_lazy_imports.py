"""A one-shot turn loads what it uses: a feature's machinery and libraries wait for the turn
that needs them (issue 30 #7). The real `nanomem chat -m` in a subprocess, default settings
against the loopback model; `python -v` names every module loaded, however it was imported
(`-X importtime` misses those loaded by `importlib.import_module`, as lazy exports are)."""

import re
import subprocess
import sys
from pathlib import Path

from nanomem.home import Home
from tests.conftest import NANOMEM, cli_env
from tests.fakes.openai_server import FakeOpenAI

# Loaded only by the turn, feature or channel that uses them.
NOT_FOR_A_PLAIN_TURN = {
    "mcp": "the MCP SDK, with no server configured",
    "nanomem.features.mcp.server": "the MCP feature's machinery, with no server configured",
    "nanomem.features.dream.dream": "Dream's machinery, with no memory command",
    "nanomem.features.dream.provenance": "/why's machinery, with no memory command",
    "difflib": "Dream's diffs and /why's matching, with no memory command",
    "pypdf": "the PDF reader, with no document sent",
    "trafilatura": "the web extractor, with no page read",
    "lxml": "the web extractor's parser",
    "nanomem.features.web.extract": "the web tools' extraction, with no page read",
    "aiohttp": "the web tools' client and the gateway's /health",
    "litellm": "the litellm transport, for a model the lean client serves",
    "dulwich": "memory's git store, with no memory change",
    "telegram": "the Telegram channel",
    "apscheduler": "the gateway's scheduler",
    "pydantic_settings": "settings from the environment: setting_source.from_environment",
    "httpx": "the lean client speaks through httpcore alone",
    "importlib.metadata": "pydantic's plugin loader, with plugins off (cli/pydantic_plugins.py)",
    "sqlite3": "the gateway's inbox and the history index, with no inbox and no search",
    "jsonschema": "an API client's response_format, checked only in that client's turn",
}


def loaded_modules(stderr: str) -> set[str]:
    return set(re.findall(r"^import '([\w.]+)' #", stderr, flags=re.MULTILINE))


def test_a_one_shot_loads_no_feature_it_does_not_use(
    home: Home, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    fake_llm.reply("hello")
    env = cli_env(home, fake_llm, PYTHONPYCACHEPREFIX=str(tmp_path / "pycache"))
    argv = [sys.executable, "-v", *NANOMEM[1:], "chat", "-m", "hi"]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "hello\n"
    modules = loaded_modules(result.stderr)
    assert "nanomem.agent.loop" in modules  # the turn ran, and `-v` saw a lazy export's load
    loaded = {
        name: why
        for name, why in NOT_FOR_A_PLAIN_TURN.items()
        if name in modules or any(m.startswith(f"{name}.") for m in modules)
    }
    assert loaded == {}


def test_pydantic_plugins_switched_on_again_are_looked_for_by_pydantic_itself() -> None:
    code = (
        "import os, sys; from nanomem.cli import pydantic_plugins; "
        "pydantic_plugins.switch_off(); "
        "import pydantic; pydantic.create_model('Off', x=(int, 1)); "
        "assert 'importlib.metadata' not in sys.modules; "
        "os.environ['PYDANTIC_DISABLE_PLUGINS'] = ''; pydantic.create_model('On', x=(int, 1)); "
        "from pydantic.plugin import _loader; print(_loader.get_plugins.__module__)"
    )
    env = {"PATH": "/usr/bin:/bin", "PYDANTIC_DISABLE_PLUGINS": "__all__"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "pydantic.plugin._loader\n"), done.stderr
