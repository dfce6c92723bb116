"""The Dockerfile without a Docker engine: its instructions are checked, and its install commands,
default command and health check run for real in a fresh virtual environment."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import venv
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram

ROOT = Path(__file__).resolve().parent.parent
# What the runtime stage's RUN may do: create the unprivileged user and the data folder.
USER_SETUP = ("groupadd", "useradd", "mkdir", "chown")
# What the builder's RUN may call: the base image's Python and pip, and the venv's pip.
BUILDER_TOOLS = ("python", "pip", "/opt/venv/bin/pip")
LOCKS = ("requirements.lock", "requirements-build.lock")
VENV = "/opt/venv"  # where the builder puts the venv the runtime stage copies
WHEELS = "/tmp/wheels"


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


def stages() -> list[list[tuple[str, str]]]:
    """The build stages, each starting with its FROM (ARGs before the first are global)."""
    found: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions():
        if keyword == "FROM":
            found.append([])
        if found:
            found[-1].append((keyword, rest))
    return found


def values(keyword: str, stage: int = -1) -> list[str]:
    """Arguments of `keyword` in one stage (the runtime stage, the last, by default)."""
    return [rest for kw, rest in stages()[stage] if kw == keyword]


def base_image() -> str:
    """The image both stages start from: the global ARG's default."""
    (arg,) = [rest for kw, rest in instructions() if kw == "ARG" and "=" in rest]
    name, _, image = arg.partition("=")
    assert all(from_.split()[0] == f"${{{name}}}" for from_ in values("FROM", 0) + values("FROM"))
    return image


def image_env() -> dict[str, str]:
    """The runtime stage's ENV, PATH aside (image_run puts the venv first on this host's)."""
    env: dict[str, str] = {}
    for rest in values("ENV"):
        env.update(pair.split("=", 1) for pair in shlex.split(rest))  # type: ignore[misc]
    assert env.pop("PATH").startswith(f"{VENV}/bin:")
    return env


def image_environment() -> dict[str, str]:
    """This process's environment without what the image lacks, plus the image's ENV."""
    leaks = ("NANOMEM_", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if not k.startswith(leaks)} | image_env()


def healthcheck() -> list[str]:
    (rest,) = values("HEALTHCHECK")
    return json.loads(rest.split(" CMD ", 1)[1])


def run_commands(stage: int) -> list[list[str]]:
    """Every command the RUN lines of a stage execute, in order, as words."""
    return [shlex.split(part) for rest in values("RUN", stage) for part in rest.split("&&")]


def builder_layers() -> tuple[list[str], list[str]]:
    """The builder's RUN lines: those before the project's sources are copied (dependencies,
    cached like Docker's layers, keyed by the lock files) and those after."""
    layers: tuple[list[str], list[str]] = ([], [])
    sources_copied = False
    for keyword, rest in stages()[0]:
        sources_copied = sources_copied or (keyword == "COPY" and "pyproject.toml" in rest)
        if keyword == "RUN":
            layers[sources_copied].append(rest)
    return layers


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_image_is_slim_unprivileged_and_runs_the_gateway() -> None:
    assert base_image().startswith("python:3.11") and "-slim" in base_image()
    env = image_env()
    assert env["NANOMEM_HOME"] == "/data" and env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert values("VOLUME") == ['["/data"]']
    (user,) = values("USER")
    assert user.split(":")[0] not in ("root", "0")
    assert json.loads(values("CMD")[0]) == ["nanomem", "gateway"]
    assert healthcheck()[0] == "python"  # no curl in a slim image


def test_dependencies_come_from_the_lock_in_a_builder_and_only_the_venv_moves_on() -> None:
    assert len(stages()) == 2 and values("FROM", 0)[0].endswith(" AS builder")
    for words in run_commands(0):
        assert words[0] in BUILDER_TOOLS, (
            f"the builder runs what this test does not mirror: {words}"
        )
    installs = [words for words in run_commands(0) if "install" in words]
    locked = [words for words in installs if "-r" in words]
    assert locked and all("--require-hashes" in words for words in locked)
    assert {words[-1] for words in locked} == set(LOCKS)
    (project,) = [words for words in installs if "-r" not in words]
    assert "--no-deps" in project  # the project itself adds no unlocked dependency
    (wheel,) = [words for words in run_commands(0) if "wheel" in words]
    assert "--no-build-isolation" in wheel  # ...and its build backend comes from the lock
    # The runtime stage: user setup and the builder's venv; nothing installed, nothing built.
    for words in run_commands(-1):
        assert words[0] in USER_SETUP, f"the runtime stage runs {words}"
    assert values("COPY") == [f"--from=builder {VENV} {VENV}"]
    runtime = "\n".join(rest for _, rest in stages()[-1])
    for tool in ("gcc", "build-essential", "apt-get", "pip ", "requirements"):
        assert tool not in runtime


@pytest.mark.xfail(
    strict=True,
    reason="no registry reachable where this was written: pin PYTHON_IMAGE to "
    "python:3.11-slim@sha256:<digest> (docker buildx imagetools inspect python:3.11-slim), "
    "then remove this mark",
)
def test_the_base_image_is_pinned_by_digest() -> None:
    image = base_image()
    assert re.fullmatch(r"python:3\.11[\w.-]*-slim[\w.-]*@sha256:[0-9a-f]{64}", image), image


def test_the_docs_run_it_under_an_init_and_keep_keys_off_the_command_line() -> None:
    readme = (ROOT / "README.md").read_text()
    docker = (ROOT / "docs" / "docker.md").read_text()
    runs = re.findall(r"docker run .*?nanomem\n", readme + docker, re.S)
    assert len(runs) >= 2  # README's, and the page's
    for command in runs:
        assert "--init" in command  # signals reach nanomem; zombie shell children are reaped
        assert "--env-file" in command
        assert not re.search(r"(-e|--env)\s+\S*(KEY|TOKEN)\S*=", command), "a secret in argv"
    compose = docker[docker.index("services:") :]
    assert "init: true" in compose and "env_file:" in compose


# Building the image's venv installs every locked dependency (a minute or more on a busy
# machine, once: it is cached); the time goes to the first test that uses it.
BUILD_TIMEOUT = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def image(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The builder's RUN lines, run for real with /opt/venv mapped to a fresh venv here and
    `python`/`pip` to another venv standing for the base image's own Python.

    The dependency layers take a minute, so (like Docker's layer cache) they are kept in
    pytest's cache under a hash of the lock files and the commands; the project's wheel is
    built and installed again whenever its sources differ from the installed one's. Under
    `pytest -n 2` both workers may need the image at once: one builds, under a lock, while the
    other waits, then finds it ready (two builds in one folder would wreck each other).
    """
    dependencies, project = builder_layers()
    locks = b"".join((ROOT / name).read_bytes() for name in LOCKS)
    digest = hashlib.sha256(locks + str(dependencies).encode())
    cache = request.config.cache.mkdir("docker-venv")
    prefix = cache / digest.hexdigest()[:16]
    context = tmp_path_factory.mktemp("image") / "src"
    context.mkdir()
    for keyword, rest_of_copy in stages()[0]:
        if keyword != "COPY":
            continue
        *sources, _ = shlex.split(rest_of_copy)
        for source in sources:
            path = ROOT / source
            copy = shutil.copytree if path.is_dir() else shutil.copy2
            copy(path, context / source)  # type: ignore[operator]
    wheels = context.parent / "wheels"
    env = image_environment() | {"NANOMEM_HOME": str(context / "data")}
    env["PATH"] = f"{prefix / 'base' / 'bin'}{os.pathsep}{os.environ['PATH']}"
    with (cache.parent / "docker-venv.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        pending = [] if (prefix / "ready").exists() else dependencies
        if pending:
            for stale in cache.iterdir():
                shutil.rmtree(stale, ignore_errors=True)
            venv.create(prefix / "base", with_pip=True)  # the base image's own Python
        wanted = sources_digest(context)
        installed = prefix / "project"
        if pending or not installed.exists() or installed.read_text() != wanted:
            if not pending:  # Docker's layer would start from the dependencies alone: pip
                # would keep the old build's files (same version) and its removed modules
                uninstall = [str(prefix / "venv" / "bin" / "pip"), "uninstall", "-y", "nanomem"]
                subprocess.run(uninstall, env=env, capture_output=True, check=True)
            for command in [*pending, *project]:
                mapped = command.replace(VENV, str(prefix / "venv")).replace(WHEELS, str(wheels))
                done = subprocess.run(
                    ["bash", "-c", mapped], cwd=context, env=env, capture_output=True, text=True
                )
                assert done.returncode == 0, f"{command} failed:\n{done.stderr[-3000:]}"
            (prefix / "ready").touch()
            installed.write_text(wanted)
    return prefix / "venv"


def sources_digest(context: Path) -> str:
    """A hash of the project's copied sources (names and bytes), bytecode caches aside."""
    digest = hashlib.sha256()
    for path in sorted(context.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(context)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


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


@BUILD_TIMEOUT
def test_the_installed_command_is_the_one_from_the_image(image: Path) -> None:
    assert (image / "bin" / "nanomem").exists()
    code, output = finished(image_run(image, ["nanomem", "gateway", "--help"]))
    assert code == 0 and "grace" in output
    probe = "import nanomem, channels.telegram.channel; print(nanomem.__file__)"
    code, output = finished(image_run(image, [str(image / "bin" / "python"), "-c", probe]))
    assert code == 0 and str(image) in output, "the image must not run the checkout's code"


@BUILD_TIMEOUT
def test_the_image_ships_the_shell_sandbox(image: Path, tmp_path: Path) -> None:
    """bwrap comes with the locked dependencies; where it can run, the image's nanomem uses it
    (under Docker it needs the options docs/docker.md names)."""
    from nanomem.tools import decide

    if decide("auto").binary is None:
        pytest.skip("bubblewrap cannot run on this machine")
    status = image_run(image, ["nanomem", "status"], NANOMEM_HOME=str(tmp_path / "data"))
    code, output = finished(status)
    assert code == 0, output
    line = next(x for x in output.splitlines() if x.startswith("shell sandbox"))
    assert line.split(None, 2)[2].startswith("sandboxed (bubblewrap, network on, in groups off;")


@BUILD_TIMEOUT
def test_the_runtime_holds_no_build_tools(image: Path) -> None:
    """The build backend (requirements-build.lock) stayed in the builder."""
    probe = (
        "import importlib.util as u; "
        "print([m for m in ('hatchling', 'editables') if u.find_spec(m)])"
    )
    code, output = finished(image_run(image, [str(image / "bin" / "python"), "-c", probe]))
    assert (code, output.strip()) == (0, "[]"), output


@BUILD_TIMEOUT
def test_the_default_command_serves_and_the_health_check_sees_it(
    image: Path, tmp_path: Path
) -> None:
    with FakeTelegram() as telegram, FakeOpenAI() as llm:
        gateway = image_run(
            image,
            json.loads(values("CMD")[0]),
            NANOMEM_HOME=str(tmp_path / "data"),
            # A port of its own choosing: one picked free here could be taken before it binds.
            NANOMEM_GATEWAY__PORT="0",
            NANOMEM_LLM__MODEL="openai/fake",
            NANOMEM_LLM__API_BASE=llm.base_url,
            NANOMEM_LLM__API_KEY="sk-docker-test",
            NANOMEM_TELEGRAM__ENABLED="true",
            NANOMEM_TELEGRAM__TOKEN=telegram.token,
            NANOMEM_TELEGRAM__BASE_URL=telegram.base_url,
            NANOMEM_TELEGRAM__BASE_FILE_URL=telegram.base_file_url,
            NANOMEM_TELEGRAM__ALLOW_FROM="[5]",
        )
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(gateway.stderr or ()), daemon=True)
        reader.start()
        try:
            deadline = time.monotonic() + 300  # a safety net: the loop ends on a passed check
            port = ""
            while True:
                assert gateway.poll() is None, "".join(lines)
                assert time.monotonic() < deadline, "the health check never passed"
                if not port:  # the gateway names the port it took once it listens
                    said = re.search(r"health at http://[\d.]+:(\d+)/health", "".join(lines))
                    port = said.group(1) if said else ""
                    time.sleep(0 if port else 0.1)
                    continue
                check = image_run(image, healthcheck(), NANOMEM_GATEWAY__PORT=port)
                if finished(check)[0] == 0:
                    break
            telegram.send_text(5, "hello from the container")
            assert telegram.wait_for_messages(5, 1, timeout=20)[0]["text"].startswith("echo:")
        finally:
            gateway.send_signal(signal.SIGTERM)
            code = gateway.wait(30)
            reader.join(5)
        assert code == 0, "".join(lines)
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
