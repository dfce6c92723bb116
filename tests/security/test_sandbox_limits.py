"""A shell command that tries to take the machine (memory, processes, disk, /tmp, CPU) against
the real `nanomem chat -m`, sandboxed ("bwrap") and under the reaper ("off"): each is stopped
at tools.shell_limits, well before the command's timeout."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from nanomem.home import Home
from tests.conftest import run_cli
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import WAIT_S
from tests.helpers.shell import SANDBOX_RUNS, as_nobody, shell_env, shown

pytestmark = pytest.mark.slow
MODES = [
    pytest.param(
        "bwrap", marks=pytest.mark.skipif(not SANDBOX_RUNS, reason="bubblewrap cannot run here")
    ),
    "off",
]
MIB = 1024 * 1024
# A Python the sandbox sees (ours may sit under a home it hides).
PYTHON = shutil.which("python3", path="/usr/bin:/usr/local/bin") or "python3"


def python_c(code: str) -> str:
    """A shell command that runs `code` (any quotes and lines) in the system's Python."""
    return f"{PYTHON} -I -S -c \"exec(bytes.fromhex('{code.encode().hex()}'))\""


def run(home: Home, fake_llm: FakeOpenAI, mode: str, command: str, **limits: str) -> str:
    """What the model was told `command` printed, run with these tools.shell_limits."""
    fake_llm.tool_call("exec", {"command": command})
    fake_llm.reply("done")
    env = shell_env(home, fake_llm, mode, NANOMEM_TOOLS__SHELL_TIMEOUT_S="20")
    env.update({f"NANOMEM_TOOLS__SHELL_LIMITS__{k.upper()}": v for k, v in limits.items()})
    result = run_cli("chat", "-m", "go", env=env)
    assert result.returncode == 0, result.stderr
    return shown(fake_llm)


@pytest.mark.parametrize("mode", MODES)
def test_a_memory_hog_gets_no_more_than_the_limit(
    home: Home, fake_llm: FakeOpenAI, mode: str
) -> None:
    hog = python_c(f"b = bytearray(1024 * {MIB}); print('HELD')")
    seen = run(home, fake_llm, mode, hog, memory_mb="256")
    assert "MemoryError" in seen and "HELD" not in seen


@pytest.mark.parametrize("mode", MODES)
def test_a_big_file_stops_at_the_file_size_limit(
    home: Home, fake_llm: FakeOpenAI, mode: str
) -> None:
    seen = run(home, fake_llm, mode, "head -c 5000000 /dev/zero > big.bin", file_size_mb="1")
    assert seen.startswith("exit code")
    assert (home.workspace / "big.bin").stat().st_size <= MIB


@pytest.mark.parametrize("folder", ["/tmp", "/var/tmp", "/dev/shm"])
@pytest.mark.skipif(not SANDBOX_RUNS, reason="bubblewrap cannot run here")
def test_filling_the_sandboxs_tmpfs_stops_at_its_size(
    home: Home, fake_llm: FakeOpenAI, folder: str
) -> None:
    fill = f"for i in 1 2 3 4 5 6; do head -c 1000000 /dev/zero > {folder}/f$i; done"
    seen = run(home, fake_llm, "bwrap", f"{fill}; cat {folder}/f* | wc -c", tmpfs_mb="2")
    assert int(seen.splitlines()[-1]) <= 2 * MIB


@pytest.mark.parametrize("mode", MODES)
def test_a_cpu_loop_ends_at_the_cpu_limit(home: Home, fake_llm: FakeOpenAI, mode: str) -> None:
    started = time.monotonic()
    seen = run(home, fake_llm, mode, "while :; do :; done", cpu_s="1")
    assert "timed out" not in seen
    assert seen.startswith("exit code")
    assert time.monotonic() - started < 15  # the 20 s timeout never came


FORK_BOMB = (
    "import os, time\n"
    "n = 0\n"
    "for _ in range(300):\n"
    "    try:\n"
    "        if os.fork() == 0:\n"
    "            time.sleep(5)\n"
    "            os._exit(0)\n"
    "    except OSError:\n"
    "        break\n"
    "    n += 1\n"
    "print('FORKED', n)\n"
)


def forked_as_nobody(fake_llm: FakeOpenAI, mode: str, tmp_path: Path, already: int) -> int:
    """How many children the fork bomb made with tools.shell_limits.processes = 40, run by
    nanomem as `nobody` (the kernel never holds root to RLIMIT_NPROC), while that user already
    runs `already` other processes."""
    with as_nobody(tmp_path) as (python, options, own_home):
        env: dict[str, Any] = shell_env(
            Home(own_home), fake_llm, mode, NANOMEM_TOOLS__SHELL_LIMITS__PROCESSES="40"
        )
        env.update(options.pop("env_extra", {}))
        others = [subprocess.Popen(["sleep", "60"], **options) for _ in range(already)]
        try:
            fake_llm.tool_call("exec", {"command": python_c(FORK_BOMB)})
            fake_llm.reply("done")
            argv = [*python, "-m", "nanomem", "chat", "-m", "go"]
            done = subprocess.run(
                argv, env=env, capture_output=True, text=True, timeout=WAIT_S * 4, **options
            )
        finally:
            for other in others:
                other.kill()
                other.wait()
    assert done.returncode == 0, done.stderr
    return int(shown(fake_llm).split("FORKED")[1].split()[0])


@pytest.mark.parametrize("mode", MODES)
def test_a_fork_bomb_is_capped_at_the_process_limit(
    fake_llm: FakeOpenAI, mode: str, tmp_path: Path
) -> None:
    # Capped near 40, far below the 300 it tries (slack: other tests' `nobody` processes
    # counted at the start may end meanwhile).
    assert forked_as_nobody(fake_llm, mode, tmp_path, already=0) < 50


@pytest.mark.parametrize("mode", MODES)
def test_the_users_other_processes_leave_a_command_its_whole_allowance(
    fake_llm: FakeOpenAI, mode: str, tmp_path: Path
) -> None:
    # RLIMIT_NPROC counts all of a user's processes: 60 already running would leave a plain
    # limit of 40 nothing at all. The command may add 40 (less the few it runs itself, and
    # what other tests start as `nobody` meanwhile).
    assert 20 <= forked_as_nobody(fake_llm, mode, tmp_path, already=60) < 50
