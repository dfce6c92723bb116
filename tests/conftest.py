"""Shared fixtures: a temp home, the loopback model server, the real CLI in a subprocess; and
the rule that sorts tests into the fast tier (the default run) and the slow tier."""

from __future__ import annotations

import io
import logging
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from loguru import logger

from nanomem.app import App, build_app
from nanomem.cli.onboard import onboard
from nanomem.config import Settings, load_settings
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider
from tests.fakes.openai_server import FakeOpenAI

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Fixtures shared by test files that live with their helpers (test files never import each other).
pytest_plugins = [
    "tests.helpers.api",
    "tests.helpers.clients",
    "tests.helpers.terminal",
    "tests.helpers.loopback",
    "tests.helpers.mcp",
    "tests.helpers.browser",  # its hook keeps asyncio tests working beside the browser's
]

NANOMEM = [sys.executable, "-m", "nanomem"]
TEST_KEY = "sk-test-very-secret-key-0123456789"

# The slow tier: what only real processes can show (the CLI's own process, signals, pseudo-
# terminals, several processes on one home, kills, the installed entry point, Docker). Whole
# files by name, or single tests by file and name; everything else is the fast tier. Keyed by
# file name, not path, so the rule survives moving files into folders.
SLOW_FILES = {
    "test_api_e2e.py",
    "test_api_clients_llm.py",  # the llm CLI in a process of its own, each call ~1.5 s
    "test_api_clients_docs.py",  # each example in a Python process of its own, ~3 s
    "test_api_clients_e2e.py",  # the real `nanomem gateway` in a process of its own
    "test_approvals_terminal.py",
    "test_dream_review_e2e.py",
    "test_shell_approval_e2e.py",
    "test_why_e2e.py",
    "test_chaos.py",
    "test_channel_contract.py",  # every channel's real gateway process against its platform
    "test_discord_e2e.py",  # the real `nanomem gateway` against the loopback Discord
    "test_discord_hostile.py",
    "test_docker.py",
    "test_e2e_processes.py",
    "test_e2e_terminal.py",
    "test_e2e_terminal_markdown.py",
    "test_exec_timeout_noise.py",  # what the CLI's own process leaves on stderr as it exits
    "test_gateway_e2e.py",
    "test_groups_e2e.py",
    "test_packaging.py",
    "test_proxy_e2e.py",
    "test_schedules_e2e.py",
    "test_import_e2e.py",
    "test_telegram_onboard_e2e.py",
    "test_terminal_reminders_e2e.py",
}
SLOW_TESTS = {
    "test_e2e_bytes.py": {  # the bytes a real process reads and writes
        "test_non_utf8_stdin_gets_a_reply_and_a_session_with_its_header",
        "test_a_reply_with_a_lone_surrogate_is_saved_and_printed",
        "test_a_lone_surrogate_in_tool_call_arguments_is_written_cleanly",
    },
    "test_e2e_cli.py": {
        "test_the_direct_transport_does_a_tool_round_trip",  # no warning at interpreter exit
        "test_commands_the_agent_runs_keep_a_normal_environment",  # a fresh process's variables
        "test_one_shot_writes_the_reply_as_it_arrives",  # a pipe reads it early
        "test_no_traceback_for_an_unwritable_home",
        "test_session_is_persisted_and_reloaded_by_a_second_process",
    },
    "test_e2e_memory.py": {"test_sigkill_during_new_loses_and_duplicates_nothing"},
    "test_home_archive_e2e.py": {"test_the_command_writes_a_private_file_here_or_a_pipe"},
    "test_install_e2e.py": {  # a real install from the registry: minutes
        "test_install_update_and_uninstall_leave_nanomem_on_the_path_then_only_the_home"
    },
    "test_security.py": {
        "test_the_shell_shows_no_secret_and_kills_what_escapes",  # a process's environment
        "test_a_gigabyte_of_shell_output_keeps_the_agent_small",  # a process's peak memory
    },
    "test_shell.py": {"test_a_gigabyte_of_output_is_read_within_a_fixed_memory_bound"},
}
TIERS = ("fast", "slow", "all")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tier",
        choices=TIERS,
        default=None,
        help="fast: the default run; slow: subprocess, signal, pty and Docker tests; all: both "
        "(the default when files or tests are named on the command line)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.option.tier is None:  # xdist workers get the controller's choice
        named = config.args_source == pytest.Config.ArgsSource.ARGS
        config.option.tier = "all" if named else "fast"


def is_slow(item: pytest.Item) -> bool:
    name = item.path.name
    test = getattr(item, "originalname", item.name)
    marked = item.get_closest_marker("slow") is not None
    return marked or name in SLOW_FILES or test in SLOW_TESTS.get(name, ())


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tier = config.option.tier
    keep, drop = [], []
    for item in items:
        slow = is_slow(item)
        if slow:
            item.add_marker(pytest.mark.slow)
        (keep if tier == "all" or (tier == "slow") == slow else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_report_header(config: pytest.Config) -> str:
    return f"tier: {config.option.tier} (--tier fast|slow|all)"


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
    # COLUMNS and LINES describe the runner's terminal (pytest-xdist's workers set 80x24), not
    # a child's pseudo-terminal: rich would wrap a 200-column screen at 80.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("NANOMEM_") and k not in ("COLUMNS", "LINES")
    }
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
    *args: str, env: dict[str, str], stdin: str | None = None, timeout: float = 300
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


def run_cli_here(
    *args: str, env: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`nanomem ARGS` in this process (the real `nanomem.cli.main.main`, its output captured; from a
    test that runs no event loop): what run_cli shows, without paying for a new interpreter.
    What the command changes for the whole process (environment, umask, standard streams,
    logging sinks) is put back afterwards."""
    from loguru import logger

    from nanomem.cli.main import main
    from nanomem.providers.litellm_provider import SWITCHES

    saved_env, saved_umask = dict(os.environ), os.umask(0o022)
    streams = sys.stdin, sys.stdout, sys.stderr
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    out, err = io.BytesIO(), io.BytesIO()
    os.environ.clear()
    os.environ.update(env)
    sys.stdin = io.TextIOWrapper(io.BytesIO((stdin or "").encode()), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    sys.stderr = io.TextIOWrapper(err, encoding="utf-8", write_through=True)
    try:
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's own errors
            code = exc.code if isinstance(exc.code, int) else 2
        sys.stdout.flush()
        sys.stderr.flush()
        stdout, stderr = out.getvalue().decode(), err.getvalue().decode()  # before they close
    finally:
        logger.remove()  # its sinks write to the streams and the log file of this call
        sys.stdin, sys.stdout, sys.stderr = streams
        root.handlers[:] = handlers
        root.setLevel(level)
        os.umask(saved_umask)
        # litellm, if the command imported it, reads its switches for the process's life:
        # they outlive the command, as they would in its own process.
        switches = {name: os.environ[name] for name in SWITCHES if name in os.environ}
        os.environ.clear()
        os.environ.update(saved_env)
        for name, value in switches.items():
            os.environ.setdefault(name, value)
    return subprocess.CompletedProcess(["nanomem", *args], code, stdout, stderr)


@contextmanager
def log_lines(level: str = "INFO") -> Iterator[list[str]]:
    """The messages logged at `level` and above meanwhile, without their newlines."""
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.rstrip("\n")), level=level, format="{message}")
    try:
        yield lines
    finally:
        logger.remove(sink)


def sleeper() -> list[str]:
    """A `sleep` command line that no other process on this machine runs: what a test's shell
    command leaves running is found by it (`survivors`), inside a PID namespace or not."""
    return ["sleep", str(random.randrange(10**6, 10**7))]


def survivors(argv: list[str], within_s: float = 0.0) -> list[int]:
    """The live processes (zombies aside) running exactly `argv` once they are all gone, or
    when `within_s` has passed."""
    wanted = ("\0".join(argv) + "\0").encode()
    deadline = time.monotonic() + within_s
    while True:
        found = []
        for entry in Path("/proc").iterdir():
            try:
                if (entry / "cmdline").read_bytes() == wanted:
                    state = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[0]
                    found += [int(entry.name)] if state != b"Z" else []
            except (OSError, IndexError):
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.02)
