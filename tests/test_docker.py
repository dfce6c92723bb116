"""The Dockerfile without a Docker engine: its instructions are checked, and its install commands,
default command and health check run for real in a fresh virtual environment."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import venv
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram

ROOT = Path(__file__).resolve().parent.parent
# What RUN may do besides pip: create the unprivileged user and the data folder.
USER_SETUP = ("groupadd", "useradd", "mkdir", "chown")
LOCKS = ("requirements.lock", "requirements-build.lock")


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in (ROOT / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, rest = (pending + line).partition(" ")
        result.append((keyword.upper(), rest.strip()))
        pending = ""
    return result


def values(keyword: str) -> list[str]:
    return [rest for kw, rest in instructions() if kw == keyword]


def image_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for rest in values("ENV"):
        env.update(pair.split("=", 1) for pair in shlex.split(rest))  # type: ignore[misc]
    return env


def image_environment() -> dict[str, str]:
    """This process's environment without what the image lacks, plus the image's ENV."""
    leaks = ("NANOMEM_", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if not k.startswith(leaks)} | image_env()


def healthcheck() -> list[str]:
    (rest,) = values("HEALTHCHECK")
    return json.loads(rest.split(" CMD ", 1)[1])


def pip_commands() -> list[list[str]]:
    """Every `pip …` the RUN lines execute, in order; anything else must be user setup."""
    commands = []
    for rest in values("RUN"):
        for part in rest.split("&&"):
            words = shlex.split(part)
            if words[0] == "pip":
                commands.append(words)
            else:
                assert words[0] in USER_SETUP, (
                    f"RUN does something this test does not mirror: {part}"
                )
    return commands


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_image_is_slim_unprivileged_and_runs_the_gateway() -> None:
    (base,) = values("FROM")
    assert base.startswith("python:3.11") and base.endswith("-slim")
    env = image_env()
    assert env["NANOMEM_HOME"] == "/data" and env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert values("VOLUME") == ['["/data"]']
    (user,) = values("USER")
    assert user.split(":")[0] not in ("root", "0")
    assert json.loads(values("CMD")[0]) == ["nanomem", "gateway"]
    assert healthcheck()[0] == "python"  # no curl in a slim image
    first, second = pip_commands()
    assert "--require-hashes" in first
    assert first[-4:] == ["-r", "requirements.lock", "-r", "requirements-build.lock"]
    assert "--no-deps" in second  # the project itself adds no unlocked dependency
    assert "--no-build-isolation" in second  # ...and its build backend comes from the lock


@pytest.fixture(scope="module")
def image(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv built by the Dockerfile's own pip commands, from a copy of what it COPYs.

    The locked dependencies take a minute to install, so that venv is cached (pytest's cache)
    under a hash of the lock file and the command; the project is reinstalled on every run.
    """
    first, *rest = pip_commands()
    locks = b"".join((ROOT / name).read_bytes() for name in LOCKS)
    digest = hashlib.sha256(locks + str(first).encode())
    cache = request.config.cache.mkdir("docker-venv")
    prefix = cache / digest.hexdigest()[:16]
    context = tmp_path_factory.mktemp("image") / "app"
    context.mkdir()
    for rest_of_copy in values("COPY"):
        *sources, _ = shlex.split(rest_of_copy)
        for source in sources:
            path = ROOT / source
            copy = shutil.copytree if path.is_dir() else shutil.copy2
            copy(path, context / source)  # type: ignore[operator]
    env = image_environment() | {"NANOMEM_HOME": str(context / "data")}
    pending = [] if (prefix / "ready").exists() else [first]
    if pending:
        for stale in cache.iterdir():
            shutil.rmtree(stale, ignore_errors=True)
        venv.create(prefix / "venv", with_pip=True)
    for command in [*pending, *rest]:
        pip = [str(prefix / "venv" / "bin" / "python"), "-m", *command]
        done = subprocess.run(pip, cwd=context, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{shlex.join(command)} failed:\n{done.stderr[-3000:]}"
    (prefix / "ready").touch()
    return prefix / "venv"


def image_run(image: Path, command: list[str], **env: str) -> subprocess.Popen[str]:
    path = f"{image / 'bin'}{os.pathsep}{os.environ['PATH']}"
    environment = image_environment() | {"PATH": path} | env
    return subprocess.Popen(
        command,
        env=environment,
        cwd=image.parent,  # not the checkout: `python -c` would import its sources
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(process: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out + err


def test_the_installed_command_is_the_one_from_the_image(image: Path) -> None:
    assert (image / "bin" / "nanomem").exists()
    code, output = finished(image_run(image, ["nanomem", "gateway", "--help"]))
    assert code == 0 and "grace" in output
    probe = "import nanomem, channels.telegram; print(nanomem.__file__)"
    code, output = finished(image_run(image, [str(image / "bin" / "python"), "-c", probe]))
    assert code == 0 and str(image) in output, "the image must not run the checkout's code"


def test_the_default_command_serves_and_the_health_check_sees_it(
    image: Path, tmp_path: Path
) -> None:
    port = str(free_port())
    with FakeTelegram() as telegram, FakeOpenAI() as llm:
        gateway = image_run(
            image,
            json.loads(values("CMD")[0]),
            NANOMEM_HOME=str(tmp_path / "data"),
            NANOMEM_GATEWAY__PORT=port,
            NANOMEM_LLM__MODEL="openai/fake",
            NANOMEM_LLM__API_BASE=llm.base_url,
            NANOMEM_LLM__API_KEY="sk-docker-test",
            NANOMEM_TELEGRAM__ENABLED="true",
            NANOMEM_TELEGRAM__TOKEN=telegram.token,
            NANOMEM_TELEGRAM__BASE_URL=telegram.base_url,
            NANOMEM_TELEGRAM__BASE_FILE_URL=telegram.base_file_url,
            NANOMEM_TELEGRAM__ALLOW_FROM="[5]",
        )
        try:
            for _ in range(300):
                check = image_run(image, healthcheck(), NANOMEM_GATEWAY__PORT=port)
                if finished(check)[0] == 0:
                    break
                assert gateway.poll() is None, finished(gateway)[1]
            else:
                raise AssertionError("the health check never passed")
            telegram.send_text(5, "hello from the container")
            assert telegram.wait_for_messages(5, 1, timeout=20)[0]["text"].startswith("echo:")
        finally:
            gateway.send_signal(signal.SIGTERM)
            code, output = finished(gateway, timeout=30)
        assert code == 0, output
    assert (tmp_path / "data" / "config.toml").exists()  # the volume holds the home


@pytest.fixture
def unhealthy() -> Iterator[int]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(503)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()


def test_the_health_check_fails_on_503_and_on_silence(unhealthy: int) -> None:
    for port in (unhealthy, free_port()):
        check = subprocess.run(
            [sys.executable, *healthcheck()[1:]],
            env={**os.environ, "NANOMEM_GATEWAY__PORT": str(port)},
            capture_output=True,
            timeout=30,
        )
        assert check.returncode != 0
