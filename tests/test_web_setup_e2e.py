"""The web app's setup through the real commands: `nanomem gateway` makes the token where none is
set (saying where, never what), `nanomem status` and `nanomem doctor` say whether it can start
(never the token), `nanomem web-link` works beside the running gateway and not with the web
app off."""

from __future__ import annotations

import re
import stat
import tomllib

import httpx
import pytest

from nanomem.home import Home
from tests.conftest import cli_env, run_cli
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.gateway import GatewayProcess

pytestmark = pytest.mark.slow


def rows(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(r"^(\S.*?) {2,}(.*)$", text, re.M)}


def test_the_gateway_makes_the_token_and_says_where_not_what(home: Home) -> None:
    with FakeOpenAI() as llm:
        off = run_cli("web-link", env=cli_env(home, llm))
        assert off.returncode == 2 and "the web app is off" in off.stderr
        with GatewayProcess(home, None, llm, NANOMEM_WEB__ENABLED="true") as gateway:
            token = tomllib.loads(home.config.read_text())["web"]["token"]
            assert len(token) >= 40 and stat.S_IMODE(home.config.stat().st_mode) == 0o600
            said = "".join(gateway.lines)
            assert "stored as web.token in" in said and token not in said
            env = cli_env(home, llm, NANOMEM_WEB__ENABLED="true")
            status = run_cli("status", env=env)
            line = rows(status.stdout)["web app"]
            assert line == f"on at http://127.0.0.1:{gateway.port}/, token set", status.stdout
            doctor = run_cli("doctor", env=env)
            assert re.search(
                r"^✓ web app +can start at http://127\.0\.0\.1:\d+/; token set$",
                doctor.stdout,
                re.M,
            )
            link = run_cli("web-link", env=env)
            assert link.returncode == 0, link.stderr
            url = link.stdout.strip()
            assert url.startswith(f"http://127.0.0.1:{gateway.port}/login/")
            assert "once, within 10 minutes" in link.stderr
            answer = httpx.get(url, follow_redirects=False)
            assert answer.status_code == 200 and "nanomem_session=" in answer.headers["set-cookie"]
            for shown in (status.stdout, doctor.stdout, link.stdout, link.stderr, said):
                assert token not in shown
        assert token not in gateway.logged()


def test_status_and_doctor_say_why_it_would_not_start(home: Home) -> None:
    env = cli_env(
        home,
        NANOMEM_WEB__ENABLED="true",
        NANOMEM_WEB__TOKEN="a-token-of-sixteen-or-more",
        NANOMEM_GATEWAY__HOST="0.0.0.0",
    )
    line = rows(run_cli("status", env=env).stdout)["web app"]
    assert line.startswith("on at http://127.0.0.1:18790/, token set; will not start:")
    assert "a-token-of-sixteen" not in line
    doctor = run_cli("doctor", env=env)
    assert doctor.returncode == 1
    assert re.search(r"^✗ web app +will not start on 0\.0\.0\.0", doctor.stdout, re.M)
    assert "web.behind_proxy = true" in doctor.stdout
    off = rows(run_cli("status", env=cli_env(home)).stdout)["web app"]
    assert off == "off (web.enabled)"
