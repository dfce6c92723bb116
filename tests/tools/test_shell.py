import asyncio
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from nanomem.audience import audience_of
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider
from nanomem.tools import OUTSIDE, ToolContext, ToolError
from nanomem.tools.sandbox import Decision, Mode, decide
from nanomem.tools.shell import ShellTool
from tests.conftest import cli_env, make_app, run_cli_here, sleeper, survivors


def test_shell_is_off_by_default(home: Home) -> None:
    assert "exec" not in make_app(home, ScriptedProvider()).tools.names


def test_shell_can_be_enabled(home: Home) -> None:
    assert "exec" in make_app(home, ScriptedProvider(), tools={"shell_enabled": True}).tools.names


async def test_exec_runs_in_the_workspace(tmp_path) -> None:  # type: ignore[no-untyped-def]
    shell = ShellTool(tmp_path, timeout_s=5, max_output_chars=1000)
    result = await shell.exec(OUTSIDE, "pwd; echo oops >&2; exit 3")
    assert result.startswith("exit code 3")
    assert str(tmp_path) in result and "oops" in result


async def test_exec_timeout_kills_the_process_group(tmp_path) -> None:  # type: ignore[no-untyped-def]
    marker = tmp_path / "survived"
    shell = ShellTool(tmp_path, timeout_s=0.5, max_output_chars=1000)
    result = await shell.exec(OUTSIDE, f"(sleep 2; touch {marker}) & sleep 10")
    assert "timed out after 0.5s" in result

    await asyncio.sleep(2.5)  # past the moment the orphan would touch its marker
    assert not marker.exists()
    control = tmp_path / "control"  # the same job, given the time, does touch its marker
    assert "timed out" not in await shell.exec(OUTSIDE, f"(sleep 0.1; touch {control}) & wait")
    assert control.exists()


async def test_exec_output_is_capped_keeping_both_ends(tmp_path) -> None:  # type: ignore[no-untyped-def]
    shell = ShellTool(tmp_path, timeout_s=5, max_output_chars=1000)
    result = await shell.exec(OUTSIDE, "echo START; seq 1 5000; echo END")
    assert "START" in result and "END" in result and "bytes cut" in result
    assert len(result) < 1200


async def test_exec_sees_none_of_our_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-secret-0123456789")
    monkeypatch.setenv("NANOMEM_TELEGRAM__TOKEN", "123:telegram-secret")
    monkeypatch.setenv("PROJECT_NAME", "shown on request")
    shell = ShellTool(tmp_path, timeout_s=5, max_output_chars=5000, allowed_env=["PROJECT_NAME"])
    result = await shell.exec(OUTSIDE, "env")
    assert "PATH=" in result and "PROJECT_NAME=shown on request" in result  # positive control
    assert "secret" not in result and "NANOMEM" not in result


@pytest.mark.parametrize("sandbox", ["auto", "off"])
async def test_a_child_that_left_the_process_group_dies_at_the_timeout(
    tmp_path: Path, sandbox: Mode
) -> None:
    sleep = sleeper()
    shell = ShellTool(tmp_path, timeout_s=1, max_output_chars=1000, sandbox=sandbox)
    script = f"setsid sh -c 'echo up > up; exec {shlex.join(sleep)}' > /dev/null 2>&1 & sleep 60"
    result = await shell.exec(OUTSIDE, script)
    assert "timed out after 1s" in result
    assert (tmp_path / "up").exists()
    assert survivors(sleep, within_s=5) == []


@pytest.mark.parametrize("sandbox", ["auto", "off"])
async def test_background_children_do_not_outlive_their_command(
    tmp_path: Path, sandbox: Mode
) -> None:
    sleep = sleeper()
    shell = ShellTool(tmp_path, timeout_s=10, max_output_chars=1000, sandbox=sandbox)
    script = (
        f"setsid sh -c 'echo up > up; exec {shlex.join(sleep)}' > /dev/null 2>&1 & "
        "while [ ! -s up ]; do sleep 0.01; done; echo started"
    )
    result = await shell.exec(OUTSIDE, script)
    assert result.startswith("exit code 0") and "started" in result
    assert survivors(sleep, within_s=5) == []


def test_status_says_whether_the_shell_is_sandboxed(home: Home) -> None:
    env = cli_env(home)
    shown = run_cli_here("status", env=env).stdout
    expected = decide("auto").describe(network=True)
    assert f"shell sandbox   {expected}" in shown
    env.update(NANOMEM_TOOLS__SHELL_SANDBOX="off")
    shown = run_cli_here("status", env=env).stdout
    assert 'shell sandbox   NOT sandboxed: tools.shell_sandbox = "off"' in shown


def test_status_shows_the_limits_and_the_groups_network_in_force(home: Home) -> None:
    env = cli_env(
        home,
        NANOMEM_TOOLS__SHELL_LIMITS__MEMORY_MB="512",
        NANOMEM_TOOLS__SHELL_LIMITS__CPU_S="30",
        NANOMEM_TOOLS__SHELL_NETWORK_GROUPS="true",
    )
    shown = run_cli_here("status", env=env).stdout
    line = next(x for x in shown.splitlines() if x.startswith("shell sandbox"))
    assert "memory 512 MB" in line and "CPU 30 s" in line
    if decide("auto").binary is not None:
        assert "network on, in groups on;" in line


def test_the_settings_default_to_the_tools_own_limits() -> None:
    from nanomem.config import ShellLimits
    from nanomem.tools import Limits

    assert Limits(**ShellLimits().model_dump()) == Limits()


def test_what_status_says_for_each_decision() -> None:
    works = Decision("auto", "/usr/bin/bwrap", "")
    assert works.describe(network=False).startswith(
        "sandboxed (bubblewrap, network off, in groups off; memory 1024 MB, "
    )
    assert works.describe(True).startswith("sandboxed (bubblewrap, network on, in groups off;")
    assert "in groups on;" in works.describe(True, network_groups=True)
    assert works.describe(True).endswith("1024 open files, CPU 300 s, tmpfs 256 MB)")
    fallback = Decision("auto", None, "bubblewrap cannot run here (No permissions)")
    assert fallback.describe(True).startswith(
        "NOT sandboxed: bubblewrap cannot run here (No permissions) (memory 1024 MB, "
    )
    strict = Decision("bwrap", None, "bubblewrap cannot run here (No permissions)")
    assert strict.refuses and strict.describe(True).endswith("no command runs")


def test_a_gigabyte_of_output_is_read_within_a_fixed_memory_bound(tmp_path: Path) -> None:
    code = (
        "import asyncio, sys\n"
        "from pathlib import Path\n"
        "from nanomem.tools import OUTSIDE\n"
        "from nanomem.tools.shell import ShellTool\n"
        "shell = ShellTool(Path(sys.argv[1]), timeout_s=120, max_output_chars=16000)\n"
        "command = 'yes nanomem | head -c 1000000000; echo; echo THE-END'\n"
        "out = asyncio.run(shell.exec(OUTSIDE, command))\n"
        # VmHWM, not ru_maxrss: ru_maxrss keeps the RSS this process had as a fork of the
        # (large) test worker before its exec.
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
        "print(int(hwm.split()[1]) // 1024)\n"
        "print(len(out), out.splitlines()[0], 'THE-END' in out, 'bytes cut' in out)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    peak_mib, summary = done.stdout.splitlines()
    assert summary.split()[1:] == ["exit", "code", "0", "True", "True"]
    assert int(summary.split()[0]) < 17000  # the model gets the capped text
    assert int(peak_mib) < 200


async def test_the_home_stays_hidden_inside_a_read_only_system_folder() -> None:
    if decide("auto").binary is None or not os.access("/opt", os.W_OK):
        pytest.skip("needs the sandbox and a writable /opt (a home such as /opt/nanomem)")
    home = Path(tempfile.mkdtemp(dir="/opt", prefix="nanomem-test-"))
    try:
        (home / "config.toml").write_text('api_key = "sk-hidden-0123456789"\n')
        workspace = home / "workspace"
        workspace.mkdir()
        look = f"cat {home}/config.toml; echo ok > made"
        shell = ShellTool(workspace, timeout_s=10, max_output_chars=2000, hidden=[home])
        result = await shell.exec(OUTSIDE, look)
        assert "sk-hidden" not in result and (workspace / "made").exists()
        control = ShellTool(workspace, timeout_s=10, max_output_chars=2000)  # nothing hidden
        assert "sk-hidden" in await control.exec(OUTSIDE, look)  # /opt itself is there, read-only
    finally:
        shutil.rmtree(home)


async def test_a_hidden_file_inside_the_workspace_shows_empty(tmp_path: Path) -> None:
    if decide("auto").binary is None:
        pytest.skip("needs the sandbox")
    (tmp_path / "config.toml").write_text('api_key = "sk-hidden-0123456789"\n')
    look = "cat config.toml; echo ok > made"
    shell = ShellTool(
        tmp_path, timeout_s=10, max_output_chars=2000, hidden=[tmp_path / "config.toml"]
    )
    result = await shell.exec(OUTSIDE, look)
    assert "sk-hidden" not in result and (tmp_path / "made").exists()
    assert (tmp_path / "config.toml").read_text().startswith("api_key")  # left as it was
    control = ShellTool(tmp_path, timeout_s=10, max_output_chars=2000)  # nothing hidden
    assert "sk-hidden" in await control.exec(OUTSIDE, look)


async def test_a_group_seeing_personal_memory_still_gets_no_unsandboxed_shell(
    tmp_path: Path,
) -> None:
    group = ToolContext(audience=audience_of("telegram:-100123", True, groups_see_personal=True))
    shell = ShellTool(tmp_path, timeout_s=5, max_output_chars=1000, sandbox="off")
    with pytest.raises(ToolError, match="not available in group chats without its sandbox"):
        await shell.exec(group, "echo ran > ran.txt")
    assert not (tmp_path / "ran.txt").exists()


async def test_a_home_inside_the_workspace_stays_hidden(tmp_path: Path) -> None:
    if decide("auto").binary is None:
        pytest.skip("needs the sandbox")
    home = tmp_path / ".nanomem"  # agent.workspace = ~ with the home in ~/.nanomem
    home.mkdir()
    (home / "config.toml").write_text('api_key = "sk-hidden-0123456789"\n')
    look = "cat .nanomem/config.toml; echo planted > .nanomem/planted; echo ok > made"
    shell = ShellTool(tmp_path, timeout_s=10, max_output_chars=2000, hidden=[home])
    result = await shell.exec(OUTSIDE, look)
    assert "sk-hidden" not in result and (tmp_path / "made").exists()
    assert not (home / "planted").exists()
    control = ShellTool(tmp_path, timeout_s=10, max_output_chars=2000)  # nothing hidden
    assert "sk-hidden" in await control.exec(OUTSIDE, look)


async def test_one_chats_sweep_never_kills_a_command_another_chat_starts_meanwhile(
    tmp_path: Path,
) -> None:
    """Without the sandbox each command ends with a sweep of what nanomem adopted; a command
    another chat starts while that sweep runs is nanomem's own child, not a leftover."""
    shell = ShellTool(tmp_path, timeout_s=30, max_output_chars=1000, sandbox="off")

    async def quick_ones() -> None:
        for _ in range(15):
            await shell.exec(OUTSIDE, "true")

    async def long_one(index: int) -> str:
        await asyncio.sleep(index * 0.02)  # staggered starts, so some land inside a sweep
        return await shell.exec(OUTSIDE, "sleep 0.5; echo alive")

    results = await asyncio.gather(
        *(quick_ones() for _ in range(4)), *(long_one(i) for i in range(12))
    )
    survived = [r for r in results[4:] if r == "exit code 0\nalive\n"]
    assert len(survived) == 12, results[4:]


def test_kill_children_leaves_no_child_nor_what_it_started() -> None:
    """What a gateway leaving at once uses: run in a process of its own, whose children are a
    group leader that ignores its stdin closing (an MCP server's way to outlive us) and what
    that one started in a new session."""
    argv = sleeper()
    code = (
        "import subprocess, sys\n"
        "from nanomem.tools import kill_children\n"
        f"inner = {shlex.join(argv)!r}\n"
        "subprocess.Popen(['sh', '-c', f'setsid {inner} & {inner}'], start_new_session=True)\n"
        "import time; time.sleep(0.5)\n"
        "print(kill_children())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 3  # sh, and both sleeps
    assert survivors(argv, within_s=5) == []
