"""The real `nanomem config …` in its own process, on a home `nanomem onboard` made without a
terminal; `config edit` in a pseudo-terminal with EDITOR set to a small script."""

import os
import stat
import sys
import tomllib
from pathlib import Path

import pexpect
import pytest

from nanomem.gateway.claim import claim
from nanomem.home import Home
from tests.conftest import NANOMEM, cli_env, run_cli
from tests.helpers import WAIT_S

pytestmark = pytest.mark.slow

TOKEN = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"


@pytest.fixture
def fresh(tmp_path: Path) -> Home:
    home = Home(tmp_path / "home")
    result = run_cli("onboard", env=cli_env(home), stdin="")
    assert result.returncode == 0, result.stderr
    return home


def test_a_newcomer_turns_telegram_on_in_three_lines(fresh: Home) -> None:
    for key, value in (("telegram.enabled", "true"), ("telegram.token", TOKEN)):
        result = run_cli("config", "set", key, value, env=cli_env(fresh), stdin="")
        assert result.returncode == 0, result.stderr
    owner = run_cli("config", "set", "telegram.owner", "4242", env=cli_env(fresh), stdin="")
    assert owner.stdout == f"telegram.owner = 4242 in {fresh.config}\n"
    text = fresh.config.read_text()
    assert text.count("[telegram]") == 1 and TOKEN in text
    assert stat.S_IMODE(fresh.config.stat().st_mode) == 0o600
    status = run_cli("status", env=cli_env(fresh), stdin="")
    assert status.returncode == 0, status.stderr
    (telegram,) = [line for line in status.stdout.splitlines() if line.startswith("telegram ")]
    assert "***Dsaw" in telegram and "owner 4242" in telegram
    assert TOKEN not in status.stdout + status.stderr


def test_the_token_is_masked_unless_asked_and_its_source_named(fresh: Home) -> None:
    env = cli_env(fresh)
    run_cli("config", "set", "telegram.token", TOKEN, env=env, stdin="")
    at = fresh.config.read_text().splitlines().index(f'token = "{TOKEN}"') + 1
    line = f"telegram.token = ***Dsaw  # {fresh.config}, line {at}\n"
    masked = run_cli("config", "get", "telegram.token", env=env, stdin="")
    assert masked.stdout == line and TOKEN not in masked.stdout + masked.stderr
    shown = run_cli("config", "get", "telegram.token", "--show-secret", env=env, stdin="")
    assert shown.stdout == line.replace("***Dsaw", f'"{TOKEN}"')
    everything = run_cli("config", "get", env=env, stdin="")
    assert everything.stdout == line and TOKEN not in everything.stdout
    from_env = run_cli(
        "config", "get", "llm.timeout_s", env=cli_env(fresh, None, NANOMEM_LLM__TIMEOUT_S="9")
    )
    assert from_env.stdout == "llm.timeout_s = 9.0  # environment variable NANOMEM_LLM__TIMEOUT_S\n"
    default = run_cli("config", "get", "llm.max_tokens", env=env, stdin="")
    assert default.stdout == "llm.max_tokens = 4096  # default\n"


def test_an_invalid_value_is_refused_and_the_file_stays_byte_identical(fresh: Home) -> None:
    before = fresh.config.read_bytes()
    env = cli_env(fresh)
    for args, says in (
        (("api.keys", "short"), f"api.keys[0]: is shorter than 16 characters ({fresh.config}"),
        (("telegram.owner", "me"), "telegram.owner takes a number (a whole one)"),
        (("llm.api_bse", "http://x"), "llm.api_bse is not a setting; did you mean llm.api_base"),
        (("tools.web", "off"), "tools.web is a table: set one of its keys"),
    ):
        result = run_cli("config", "set", *args, env=env, stdin="")
        assert result.returncode == 2 and says in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert fresh.config.read_bytes() == before
    assert leftovers(fresh) == []


def test_unset_puts_the_commented_default_back(fresh: Home) -> None:
    before = fresh.config.read_text()
    env = cli_env(fresh)
    run_cli("config", "set", "gateway.port", "8080", env=env, stdin="")
    assert "port = 8080\n" in fresh.config.read_text()
    result = run_cli("config", "unset", "gateway.port", env=env, stdin="")
    assert result.stdout == f"gateway.port unset in {fresh.config} (its default: 18790)\n"
    assert fresh.config.read_text() == before
    again = run_cli("config", "unset", "gateway.port", env=env, stdin="")
    assert again.returncode == 0 and "not set in" in again.stdout


def test_path_prints_the_file(fresh: Home, tmp_path: Path) -> None:
    assert run_cli("config", "path", env=cli_env(fresh)).stdout == f"{fresh.config}\n"
    other = tmp_path / "other.toml"
    other.write_text("[llm]\n")
    named = run_cli("--config", str(other), "config", "path", env=cli_env(fresh))
    assert named.stdout == f"{other}\n"


def test_a_variable_that_wins_is_named_when_the_file_is_changed(fresh: Home) -> None:
    env = cli_env(fresh, None, NANOMEM_TELEGRAM__ENABLED="false")
    result = run_cli("config", "set", "telegram.enabled", "true", env=env, stdin="")
    assert result.returncode == 0
    assert (
        "warning: the environment variable NANOMEM_TELEGRAM__ENABLED is set and wins over the "
        "file for telegram.enabled"
    ) in result.stderr


def test_a_running_gateway_is_told_to_restart(fresh: Home) -> None:
    with claim(fresh, 18999):  # this process holds the home as its gateway, as one would
        result = run_cli("config", "set", "log.level", "DEBUG", env=cli_env(fresh), stdin="")
    assert result.returncode == 0
    assert (
        f"a gateway runs on this home (pid {os.getpid()}, port 18999): restart it to use the change"
    ) in result.stderr


def test_a_pasted_table_twice_is_explained_and_can_be_set_instead(fresh: Home) -> None:
    good = fresh.config.read_text()
    fresh.config.write_text(good + "\n[telegram]\nenabled = true\n")
    first, second = good.splitlines().index("[telegram]") + 1, len(good.splitlines()) + 2
    status = run_cli("status", env=cli_env(fresh), stdin="")
    assert status.returncode == 2
    assert (
        f"{fresh.config} declares [telegram] twice (lines {first} and {second}): merge them into "
        "one, or use `nanomem config set telegram.enabled true`"
    ) in status.stderr
    fresh.config.write_text(good)
    fixed = run_cli("config", "set", "telegram.enabled", "true", env=cli_env(fresh), stdin="")
    assert fixed.returncode == 0
    assert tomllib.loads(fresh.config.read_text())["telegram"] == {"enabled": True}


@pytest.mark.parametrize(
    ("name", "value"),
    [("NANOMEM_API__KEYS", "[one-long-key"), ("NANOMEM_TELEGRAM__ALLOW_FROM", "[4242")],
)
def test_a_list_variable_that_cannot_be_read_exits_2_naming_it(
    fresh: Home, name: str, value: str
) -> None:
    result = run_cli("status", env=cli_env(fresh, None, **{name: value}), stdin="")
    assert result.returncode == 2
    assert f"(environment variable {name}): write a JSON list such as" in result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr


def leftovers(home: Home) -> list[str]:
    """Temporary copies of the config a command left behind."""
    return [p.name for p in home.root.iterdir() if p.name.startswith(".config")]


def editor_script(tmp_path: Path, *edits: str) -> str:
    """An EDITOR that applies the next of `edits` (a sed expression) at each call."""
    script = tmp_path / "editor.sh"
    calls = tmp_path / "calls"
    lines = ["#!/bin/sh", f"n=$(cat {calls} 2>/dev/null || echo 0); echo $((n+1)) > {calls}"]
    for number, expression in enumerate(edits):
        lines.append(f"[ $n = {number} ] && sed -i '{expression}' \"$1\"")
    script.write_text("\n".join([*lines, "exit 0", ""]))
    script.chmod(0o755)
    return str(script)


def spawn_edit(home: Home, editor: str) -> pexpect.spawn:
    env = cli_env(home, None, EDITOR=editor, TERM="xterm")
    env.pop("VISUAL", None)
    return pexpect.spawn(
        sys.executable,
        [*NANOMEM[1:], "config", "edit"],
        env=env,
        encoding="utf-8",
        timeout=WAIT_S,
    )


def test_edit_saves_a_valid_change(fresh: Home, tmp_path: Path) -> None:
    before = fresh.config.read_text()
    child = spawn_edit(fresh, editor_script(tmp_path, "s/^# owner = 123456789$/owner = 4242/"))
    child.expect_exact(f"saved {fresh.config}")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert fresh.config.read_text() == before.replace("# owner = 123456789", "owner = 4242")


def test_an_edit_names_a_variable_that_wins_over_it(fresh: Home, tmp_path: Path) -> None:
    editor = editor_script(tmp_path, "s/^# port = 18790$/port = 8080/")
    env = cli_env(fresh, None, EDITOR=editor, NANOMEM_GATEWAY__PORT="9000")
    result = run_cli("config", "edit", env=env, stdin="")
    assert result.returncode == 0 and f"saved {fresh.config}" in result.stdout
    assert "NANOMEM_GATEWAY__PORT is set and wins over the file for gateway.port" in result.stderr


def test_an_invalid_edit_is_offered_again_then_saved(fresh: Home, tmp_path: Path) -> None:
    editor = editor_script(
        tmp_path, "s/^# owner = 123456789$/owner = -5/", "s/^owner = -5$/owner = 5/"
    )
    child = spawn_edit(fresh, editor)
    child.expect_exact("telegram.owner: Input should be greater than 0")
    child.expect_exact("Edit again (e) or discard your changes (d)? [E/d] ")
    child.sendline("e")
    child.expect_exact(f"saved {fresh.config}")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert tomllib.loads(fresh.config.read_text())["telegram"]["owner"] == 5


def test_an_invalid_edit_discarded_leaves_the_file(fresh: Home, tmp_path: Path) -> None:
    before = fresh.config.read_bytes()
    child = spawn_edit(fresh, editor_script(tmp_path, "s/^# owner = 123456789$/owner = -5/"))
    child.expect_exact("Edit again (e) or discard your changes (d)? [E/d] ")
    child.sendline("d")
    child.expect_exact("your changes were discarded")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 2 and fresh.config.read_bytes() == before


def test_an_invalid_edit_without_a_terminal_is_discarded(fresh: Home, tmp_path: Path) -> None:
    before = fresh.config.read_bytes()
    editor = editor_script(tmp_path, "s/^\\[telegram\\]$/[telegram]\\nenabled = maybe/")
    result = run_cli("config", "edit", env=cli_env(fresh, None, EDITOR=editor), stdin="")
    assert result.returncode == 2
    assert "malformed TOML" in result.stderr and "discarded" in result.stdout
    assert fresh.config.read_bytes() == before
    assert leftovers(fresh) == []
