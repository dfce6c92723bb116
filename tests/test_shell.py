from nanomem.onboard import Home
from nanomem.scripted import ScriptedProvider
from nanomem.shelltool import ShellTool
from tests.conftest import make_app


def test_shell_is_off_by_default(home: Home) -> None:
    assert "exec" not in make_app(home, ScriptedProvider()).tools.names


def test_shell_can_be_enabled(home: Home) -> None:
    assert "exec" in make_app(home, ScriptedProvider(), tools={"shell_enabled": True}).tools.names


async def test_exec_runs_in_the_workspace(tmp_path) -> None:  # type: ignore[no-untyped-def]
    shell = ShellTool(tmp_path, timeout_s=5, max_output_chars=1000)
    result = await shell.exec("pwd; echo oops >&2; exit 3")
    assert result.startswith("exit code 3")
    assert str(tmp_path) in result and "oops" in result


async def test_exec_timeout_kills_the_process_group(tmp_path) -> None:  # type: ignore[no-untyped-def]
    marker = tmp_path / "survived"
    shell = ShellTool(tmp_path, timeout_s=0.5, max_output_chars=1000)
    result = await shell.exec(f"(sleep 2; touch {marker}) & sleep 10")
    assert "timed out after 0.5s" in result
    import asyncio

    await asyncio.sleep(2.5)
    assert not marker.exists()


async def test_exec_output_is_capped_keeping_both_ends(tmp_path) -> None:  # type: ignore[no-untyped-def]
    shell = ShellTool(tmp_path, timeout_s=5, max_output_chars=1000)
    result = await shell.exec("echo START; seq 1 5000; echo END")
    assert "START" in result and "END" in result and "characters cut" in result
    assert len(result) < 1200
