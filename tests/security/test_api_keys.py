"""Weak or blank agent-API keys, through the real `nanomem` command; and keys never shown."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest

from nanomem.home import Home
from tests.conftest import cli_env, log_lines, run_cli, run_cli_here
from tests.helpers.api import Served

STRONG = "nm-strong-agent-api-key-0123456789"
OTHER = "nm-another-strong-key-abcdefghijkl"


@pytest.mark.slow
@pytest.mark.parametrize("key", ["", "   ", "short-secret-9"])
def test_a_blank_or_short_key_stops_the_gateway_naming_it_never_its_value(
    home: Home, key: str
) -> None:
    env = cli_env(
        home,
        None,
        NANOMEM_LLM__MODEL="openai/fake",
        NANOMEM_API__ENABLED="true",
        NANOMEM_API__KEYS=json.dumps([STRONG, key]),
        NANOMEM_GATEWAY__HOST="0.0.0.0",
        NANOMEM_GATEWAY__PORT="0",
    )
    try:
        result = run_cli("gateway", env=env, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("the gateway started with a blank or short api.keys entry")
    assert result.returncode == 2, result.stderr
    output = result.stdout + result.stderr
    assert "api.keys[1]" in output and "Traceback" not in output
    assert STRONG not in output and (not key.strip() or key not in output)


def test_status_shows_how_many_keys_and_only_their_masked_forms(home: Home) -> None:
    env = cli_env(
        home, None, NANOMEM_API__ENABLED="true", NANOMEM_API__KEYS=json.dumps([STRONG, OTHER])
    )
    env["NANOMEM_LLM__API_KEY"] = "sk-the-model-key-abcdefghij-9876"
    result = run_cli_here("status", env=env)
    assert result.returncode == 0, result.stderr
    assert "enabled, 2 keys (***6789, ***ijkl)" in result.stdout
    assert "set (***9876)" in result.stdout
    for secret in (STRONG, OTHER, env["NANOMEM_LLM__API_KEY"]):
        assert secret[:-4] not in result.stdout + result.stderr


async def test_a_wrong_key_is_refused_and_never_echoed(served: Served) -> None:
    wrong = "nm-presented-wrong-key-000000000000"
    with log_lines("DEBUG") as lines:
        status, body = await served.post(
            b'{"messages": [{"role": "user", "content": "hi"}]}', wrong
        )
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
    assert wrong not in json.dumps(body) and wrong not in "\n".join(lines)
    assert served.provider.calls == []


def test_onboarding_with_the_api_enabled_makes_a_key_and_never_prints_it(tmp_path: Path) -> None:
    home = Home(tmp_path / "fresh")
    before = run_cli_here("status", env=cli_env(home, None, NANOMEM_API__ENABLED="true"))
    assert "enabled, no keys yet (`nanomem gateway` makes one" in before.stdout
    result = run_cli("onboard", env=cli_env(home, None, NANOMEM_API__ENABLED="true"))
    assert result.returncode == 0, result.stderr
    (key,) = tomllib.loads(home.config.read_text())["api"]["keys"]
    assert len(key) >= 32 and home.config.stat().st_mode & 0o777 == 0o600
    output = result.stdout + result.stderr
    assert f"api.keys in {home.config}" in output and key not in output
    status = run_cli_here("status", env=cli_env(home, None, NANOMEM_API__ENABLED="true"))
    assert f"enabled, 1 key (***{key[-4:]})" in status.stdout and key not in status.stdout
    again = run_cli("onboard", env=cli_env(home, None, NANOMEM_API__ENABLED="true"))
    assert tomllib.loads(home.config.read_text())["api"]["keys"] == [key]  # never replaced
    assert "api.keys" not in again.stdout + again.stderr


def test_a_key_fills_an_empty_array_written_over_two_lines(home: Home) -> None:
    from nanomem.cli.onboard import create_api_key

    # Rewriting one line of it would break the file; tomlkit replaces the array where it stands.
    text = home.config.read_text().replace("# keys = []", "keys = [\n]", 1)
    home.config.write_text(text)
    assert create_api_key(home.config, home.lock("config"))
    (key,) = tomllib.loads(home.config.read_text())["api"]["keys"]
    assert home.config.read_text() == text.replace("keys = [\n]", f'keys = ["{key}"]', 1)


def test_two_starts_at_once_make_one_key(home: Home) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from nanomem.cli.onboard import create_api_key

    # Each its own FileLock on the same lock file, as two processes would hold it.
    with ThreadPoolExecutor(2) as pool:
        made = list(pool.map(lambda _: create_api_key(home.config, home.lock("config")), range(2)))
    assert sorted(made) == [False, True]
    assert len(tomllib.loads(home.config.read_text())["api"]["keys"]) == 1
