"""A real Matrix homeserver for the tests: Synapse from its own venv (.ci/run installs it from
requirements-synapse.lock), on loopback with SQLite and raised rate limits, started once per
test session; users registered through the shared-secret admin API."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHON = Path(os.environ.get("SYNAPSE_PYTHON", ROOT / ".venv/synapse/bin/python"))
INSTALL = (
    "python3 -m venv .venv/synapse && .venv/synapse/bin/python -m pip install "
    "--require-hashes -r requirements-synapse.lock"
)
# Set by .ci/run, which installs Synapse: there a missing homeserver fails instead of skipping.
REQUIRED = "SYNAPSE_REQUIRED"
SERVER = "localhost"
_LOTS = {"per_second": 10_000, "burst_count": 10_000}


@dataclass(frozen=True)
class User:
    user_id: str
    token: str
    password: str


class Synapse:
    def __init__(self, folder: Path, tuned: dict[str, Any] | None = None) -> None:
        self.folder = folder
        self.tuned = tuned or {}  # merged into the configuration (a benchmark's experiments)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.secret = secrets.token_hex(16)
        self.proc: subprocess.Popen[bytes] | None = None
        self._admin: User | None = None

    def start(self) -> Synapse:
        config = self.folder / "homeserver.yaml"
        config.write_text(json.dumps(self._config() | self.tuned))  # YAML reads JSON
        run = [str(PYTHON), "-m", "synapse.app.homeserver", "--config-path", str(config)]
        subprocess.run([*run, "--generate-keys"], check=True, capture_output=True, timeout=120)
        log = (self.folder / "synapse.log").open("wb")
        self.proc = subprocess.Popen(run, stdout=log, stderr=subprocess.STDOUT, cwd=self.folder)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"Synapse exited: {self.log()[-3000:]}")
            try:
                self.call("GET", "/_matrix/client/versions")
                return self
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"Synapse did not start: {self.log()[-3000:]}")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log(self) -> str:
        return (self.folder / "synapse.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def _config(self) -> dict[str, Any]:
        d = self.folder
        return {
            "server_name": SERVER,
            "pid_file": str(d / "homeserver.pid"),
            "listeners": [
                {
                    "port": self.port,
                    "bind_addresses": ["127.0.0.1"],
                    "type": "http",
                    "tls": False,
                    "resources": [{"names": ["client"], "compress": False}],
                }
            ],
            "database": {"name": "sqlite3", "args": {"database": str(d / "homeserver.db")}},
            "media_store_path": str(d / "media"),
            "signing_key_path": str(d / "signing.key"),
            "registration_shared_secret": self.secret,
            "macaroon_secret_key": secrets.token_hex(16),
            "form_secret": secrets.token_hex(16),
            "report_stats": False,
            "trusted_key_servers": [],
            "suppress_key_server_warning": True,
            "enable_registration": False,
            "bcrypt_rounds": 4,  # registering a user is then milliseconds, not a quarter second
            "rc_message": _LOTS,
            "rc_registration": _LOTS,
            "rc_login": {"address": _LOTS, "account": _LOTS, "failed_attempts": _LOTS},
            "rc_joins": {"local": _LOTS, "remote": _LOTS},
            "rc_joins_per_room": _LOTS,
            "rc_invites": {"per_room": _LOTS, "per_user": _LOTS, "per_issuer": _LOTS},
            "rc_admin_redaction": _LOTS,
        }

    def call(
        self, method: str, path: str, body: dict[str, Any] | None = None, token: str = ""
    ) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{method} {path}: {exc.code} {exc.read()[:500]!r}") from None

    def fetch(self, path: str, token: str) -> bytes:
        """A GET's body as bytes (a media download)."""
        request = urllib.request.Request(self.url + path)
        request.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(request, timeout=30) as response:
            return bytes(response.read())

    def limit_messages(self, user_id: str, per_second: int, burst: int) -> None:
        """Hold one user to a message rate of its own (the admin API's override)."""
        if self._admin is None:
            self._admin = self.register("admin", admin=True)
        path = f"/_synapse/admin/v1/users/{user_id}/override_ratelimit"
        body = {"messages_per_second": per_second, "burst_count": burst}
        self.call("POST", path, body, self._admin.token)

    def register(self, name: str, *, admin: bool = False) -> User:
        """A new user, through the shared-secret admin API (no register_new_matrix_user: 10 s)."""
        password = secrets.token_hex(8)
        nonce = self.call("GET", "/_synapse/admin/v1/register")["nonce"]
        mac = hmac.new(self.secret.encode(), digestmod=hashlib.sha1)
        kind = b"admin" if admin else b"notadmin"
        mac.update(b"\x00".join([nonce.encode(), name.encode(), password.encode(), kind]))
        body = {
            "nonce": nonce,
            "username": name,
            "password": password,
            "admin": admin,
            "mac": mac.hexdigest(),
        }
        found = self.call("POST", "/_synapse/admin/v1/register", body)
        return User(found["user_id"], found["access_token"], password)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def synapse_or_skip() -> None:
    if PYTHON.exists():
        return
    why = f"Synapse is not installed at {PYTHON}; install it with: {INSTALL}"
    if os.environ.get(REQUIRED):
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="session")
def synapse(tmp_path_factory: pytest.TempPathFactory) -> Any:
    synapse_or_skip()
    server = Synapse(tmp_path_factory.mktemp("synapse")).start()
    try:
        yield server
    finally:
        server.stop()
