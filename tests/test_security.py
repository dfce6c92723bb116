"""Attacks from a hostile model or hostile files, through the real `nanomem` command."""

from __future__ import annotations

from pathlib import Path

from nanomem.onboard import Home
from tests.conftest import cli_env, run_cli
from tests.fakes.openai_server import FakeOpenAI


def payload(marker: Path) -> str:
    return "{{ cycler.__init__.__globals__.os.popen('touch " + str(marker) + "').read() }}"


def test_the_agent_cannot_write_a_template(
    home: Home, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    marker = tmp_path / "PWNED"
    fake_llm.tool_call("write_file", {"path": "templates/system.md.j2", "content": payload(marker)})
    fake_llm.reply("tried")
    fake_llm.reply("next turn")
    env = cli_env(home, fake_llm)
    assert run_cli("chat", "-m", "rewrite your own rules", env=env).returncode == 0
    observation = fake_llm.requests[1]["messages"][-1]["content"]
    assert observation.startswith("Error:") and "maintained by nanomem" in observation
    assert not (home.workspace / "templates" / "system.md.j2").exists()
    assert run_cli("chat", "-m", "and now?", env=env).returncode == 0
    assert not marker.exists()


def test_a_hostile_template_on_disk_runs_nothing(
    home: Home, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    marker = tmp_path / "PWNED"
    overrides = home.workspace / "templates"
    overrides.mkdir(exist_ok=True)
    (overrides / "system.md.j2").write_text(payload(marker))
    fake_llm.reply("fine")
    result = run_cli("chat", "-m", "hello", env=cli_env(home, fake_llm))
    assert result.returncode == 0 and result.stdout.strip() == "fine", result.stderr
    assert not marker.exists()
    system = fake_llm.requests[0]["messages"][0]["content"]
    assert "cycler" not in system and len(system) > 200  # the bundled prompt instead
    log = (home.logs / "nanomem.log").read_text()
    assert f"template {overrides / 'system.md.j2'} cannot be used" in log
    assert "Traceback" not in result.stderr
