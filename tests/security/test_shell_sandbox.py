"""A hostile shell command against the real `nanomem chat -m`, in each `tools.shell_sandbox`
mode: "bwrap" (the bubblewrap sandbox) and "off" (the reaper, the fallback where bwrap cannot
run). The fake model server scripts the `exec` call; approval is off, since what a command can
do once it runs is tested here, not who lets it run."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nanomem.home import Home
from nanomem.tools.sandbox import decide
from tests.conftest import NANOMEM, run_cli, sleeper, survivors
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.helpers import WAIT_S, wait_until
from tests.helpers.shell import SANDBOX_RUNS, as_nobody, shell_env, shown

pytestmark = pytest.mark.slow
MODES = [
    pytest.param(
        "bwrap", marks=pytest.mark.skipif(not SANDBOX_RUNS, reason="bubblewrap cannot run here")
    ),
    "off",
]


@pytest.fixture
def sleep_argv() -> Iterator[list[str]]:
    """The command line a test's escape runs; whatever still runs it is killed afterwards,
    so a failing test leaves nothing behind."""
    argv = sleeper()
    yield argv
    for pid in survivors(argv):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("mode", MODES)
def test_a_command_that_kills_its_reaper_leaves_nothing_running(
    home: Home, fake_llm: FakeOpenAI, mode: str, sleep_argv: list[str]
) -> None:
    sleep = shlex.join(sleep_argv)
    attack = (
        f"setsid sh -c 'echo up > up.txt; exec {sleep}' >/dev/null 2>&1 & "
        "while [ ! -s up.txt ]; do sleep 0.01; done; kill -9 $PPID; echo still here"
    )
    fake_llm.tool_call("exec", {"command": attack})
    fake_llm.reply("done")
    result = run_cli("chat", "-m", "go", env=shell_env(home, fake_llm, mode))
    assert result.returncode == 0, result.stderr
    assert (home.workspace / "up.txt").exists()  # the escape did start
    assert shown(fake_llm).startswith("exit code")
    assert survivors(sleep_argv, within_s=5) == []


@pytest.mark.parametrize("mode", MODES)
def test_sigkill_of_nanomem_mid_command_ends_the_command(
    home: Home, fake_llm: FakeOpenAI, mode: str, sleep_argv: list[str]
) -> None:
    sleep = shlex.join(sleep_argv)
    command = f"setsid sh -c 'echo up > up.txt; exec {sleep}' >/dev/null 2>&1 & exec {sleep}"
    fake_llm.tool_call("exec", {"command": command})
    env = shell_env(home, fake_llm, mode)
    nanomem = subprocess.Popen([*NANOMEM, "chat", "-m", "go"], env=env, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: len(survivors(sleep_argv)) == 2, what="the command and its escape")
        assert (home.workspace / "up.txt").exists()
    finally:
        nanomem.send_signal(signal.SIGKILL)
        nanomem.wait()
    # Well within tools.shell_timeout_s (60 s): nothing waits for the timeout that nobody keeps.
    assert survivors(sleep_argv, within_s=10) == []


@pytest.fixture
def unprivileged(tmp_path: Path) -> Iterator[tuple[list[str], dict[str, Any], Path]]:
    """How to start nanomem as `nobody` when the tests run as root (root reads every
    process's environment, so only another user shows what PR_SET_DUMPABLE protects)."""
    with as_nobody(tmp_path) as how:
        yield how


@pytest.mark.parametrize("mode", MODES)
def test_a_command_cannot_read_nanomems_environment(
    home: Home,
    fake_llm: FakeOpenAI,
    mode: str,
    unprivileged: tuple[list[str], dict[str, Any], Path],
) -> None:
    canary = f"canary-{os.getpid()}-{time.monotonic_ns()}"
    pid: list[int] = []

    def script(request: dict[str, Any]) -> Step:
        if len(request["messages"]) > 2:
            return Step.reply("done")
        wait_until(lambda: pid, what="nanomem's pid")
        return Step.tool_call("exec", {"command": f"cat /proc/{pid[0]}/environ; ls /proc"})

    fake_llm.set_fallback(script)
    python, options, own_home = [sys.executable], {}, home.root
    if mode == "off":  # our own user's command: only the kernel's dumpable rule stands between
        python, options, own_home = unprivileged
    env = shell_env(Home(own_home), fake_llm, mode, NANOMEM_TEST_CANARY=canary)
    env.update(options.pop("env_extra", {}))
    argv = [*python, "-m", "nanomem", "chat", "-m", "go"]
    nanomem = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, **options)
    pid.append(nanomem.pid)
    _, stderr = nanomem.communicate(timeout=WAIT_S)
    assert nanomem.returncode == 0, stderr
    seen = shown(fake_llm)
    assert seen.startswith("exit code")  # the command ran
    assert canary not in seen and "NANOMEM_LLM__API_KEY" not in seen
    # Not there at all in the sandbox (its own PID namespace); root's alone without it.
    assert ("Permission denied" if mode == "off" else "No such file") in seen


@pytest.mark.parametrize("mode", MODES)
def test_a_command_writes_nowhere_but_the_workspace(
    home: Home, fake_llm: FakeOpenAI, mode: str, tmp_path: Path
) -> None:
    if mode == "off":
        pytest.skip("without the sandbox a command has the user's own rights to every file")
    outside = tmp_path / "outside.txt"  # under /tmp, visible to every process
    config = home.config.read_bytes()
    attack = (
        f"ls -A {home.root}; echo pwned >> {home.config}; echo pwned > {outside}; "
        f"echo pwned > {home.sessions}/planted.jsonl; echo fine > inside.txt"
    )
    fake_llm.tool_call("exec", {"command": attack})
    fake_llm.reply("done")
    result = run_cli("chat", "-m", "go", env=shell_env(home, fake_llm, mode))
    assert result.returncode == 0, result.stderr
    assert (home.workspace / "inside.txt").read_text() == "fine\n"  # the command did run
    assert home.config.read_bytes() == config
    assert not outside.exists() and not (home.sessions / "planted.jsonl").exists()
    # The home is not there to list: only the folder the workspace is mounted on.
    assert shown(fake_llm).splitlines()[1:2] == ["workspace"]


@pytest.mark.parametrize("mode", MODES)
def test_in_a_group_only_the_rooms_folder_is_writable(
    home: Home, fake_llm: FakeOpenAI, mode: str
) -> None:
    user_md = home.workspace / "USER.md"
    user_md.write_text("the owner's secret plans\n")
    soul = (home.workspace / "SOUL.md").read_bytes()
    attack = (
        f"echo hello > note.txt; echo pwned >> {home.workspace}/SOUL.md; "
        f"cat {user_md}; echo pwned > {home.workspace}/planted.txt"
    )
    fake_llm.tool_call("exec", {"command": attack})
    fake_llm.reply("done")
    session = "telegram:-100777"
    result = run_cli(
        "chat", "-m", "go", "--session", session, "--room", env=shell_env(home, fake_llm, mode)
    )
    assert result.returncode == 0, result.stderr
    room = home.workspace / "rooms" / "telegram_-100777"
    assert (home.workspace / "SOUL.md").read_bytes() == soul
    assert not (home.workspace / "planted.txt").exists()
    assert "secret plans" not in shown(fake_llm)
    if mode == "off":
        assert "not available in group chats" in shown(fake_llm)
        assert not room.exists()
    else:
        assert (room / "note.txt").read_text() == "hello\n"


@pytest.fixture
def listener() -> Iterator[tuple[int, list[object]]]:
    """A loopback TCP server outside the sandbox, counting the connections it accepts."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[object] = []

    def serve() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            accepted.append(connection)
            connection.close()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1], accepted
    server.close()


@pytest.mark.parametrize("network", ["false", "true"])
@pytest.mark.parametrize("mode", MODES)
def test_shell_network_off_reaches_nothing(
    home: Home,
    fake_llm: FakeOpenAI,
    mode: str,
    network: str,
    listener: tuple[int, list[object]],
) -> None:
    if mode == "off":
        pytest.skip("without the sandbox the network cannot be taken from a command")
    port, accepted = listener
    probe = f"bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' && echo CONNECTED || echo REFUSED"
    fake_llm.tool_call("exec", {"command": probe})
    fake_llm.reply("done")
    env = shell_env(home, fake_llm, mode, NANOMEM_TOOLS__SHELL_NETWORK=network)
    result = run_cli("chat", "-m", "go", env=env)
    assert result.returncode == 0, result.stderr
    if network == "true":  # positive control: the same probe, allowed, does connect
        assert "CONNECTED" in shown(fake_llm) and len(accepted) == 1
    else:
        assert "REFUSED" in shown(fake_llm) and accepted == []


def without_user_namespaces(argv: list[str]) -> list[str]:
    """`argv` run where no user namespace can be made, as in a container under Docker's default
    seccomp profile: inside a bwrap that forbids them (everything else stays as it is)."""
    binary = decide("auto").binary
    assert binary is not None
    outer = ["--unshare-user", "--disable-userns", "--bind", "/", "/", "--dev", "/dev"]
    return [binary, *outer, "--proc", "/proc", "--", *argv]


@pytest.mark.skipif(not SANDBOX_RUNS, reason="bubblewrap cannot run here")
@pytest.mark.parametrize("mode", ["auto", "bwrap"])
def test_where_bwrap_cannot_run_auto_falls_back_and_bwrap_refuses(
    home: Home, fake_llm: FakeOpenAI, mode: str
) -> None:
    env = shell_env(home, fake_llm, mode)
    status = subprocess.run(
        without_user_namespaces([*NANOMEM, "status"]),
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert status.returncode == 0, status.stderr
    line = next(x for x in status.stdout.splitlines() if x.startswith("shell sandbox"))
    assert "NOT sandboxed: bubblewrap cannot run here (bwrap: Creating new namespace" in line
    fake_llm.tool_call("exec", {"command": "echo ran > ran.txt; echo ran"})
    fake_llm.reply("done")
    chat = subprocess.run(
        without_user_namespaces([*NANOMEM, "chat", "-m", "go"]),
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert chat.returncode == 0, chat.stderr
    log = (home.logs / "nanomem.log").read_text()
    if mode == "auto":  # the reaper runs it, and the log says once why
        assert shown(fake_llm) == "exit code 0\nran\n"
        assert log.count("shell: NOT sandboxed: bubblewrap cannot run here") == 1
        assert line.endswith(")")
    else:
        assert line.endswith('shell_sandbox = "bwrap": no command runs')
        assert shown(fake_llm).startswith("Error: the shell cannot run: NOT sandboxed")
        assert not (home.workspace / "ran.txt").exists()


def test_a_config_file_outside_the_home_stays_hidden(home: Home, fake_llm: FakeOpenAI) -> None:
    """`nanomem --config /opt/nanomem/config.toml` (or one under /etc): the keys are in a file
    the sandbox shows read-only with the rest of that system folder, unless it is hidden too."""
    if not SANDBOX_RUNS or not os.access("/opt", os.W_OK):
        pytest.skip("needs the sandbox and a writable /opt (a config such as /opt/nanomem/...)")
    folder = Path(tempfile.mkdtemp(dir="/opt", prefix="nanomem-test-"))
    try:
        config = folder / "config.toml"
        canary = f"sk-canary-{os.getpid()}-{time.monotonic_ns()}"
        config.write_text(f"{home.config.read_text()}\n# the keys: {canary}\n")
        (folder / "neighbour.txt").write_text("visible\n")  # positive control: /opt is there
        fake_llm.tool_call("exec", {"command": f"cat {folder}/neighbour.txt {config}"})
        fake_llm.reply("done")
        env = shell_env(home, fake_llm, "bwrap")
        result = run_cli("--config", str(config), "chat", "-m", "go", env=env)
        assert result.returncode == 0, result.stderr
        seen = shown(fake_llm)
        assert seen.startswith("exit code") and "visible" in seen, seen
        assert canary not in seen, seen
    finally:
        shutil.rmtree(folder)
