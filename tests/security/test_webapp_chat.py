"""The Chat page's routes under attack, through the real gateway, as a logged-in owner's
browser (or someone who stole nothing but the cookie's name) could send them: uploads over the
limit or not what they claim, another conversation's files, paths that climb out, a huge
message, a flood of event streams."""

from __future__ import annotations

import http.client
import re
import secrets
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.browser import WEB_TOKEN, web_gateway
from tests.helpers.gateway import GatewayProcess, onboarded

pytestmark = pytest.mark.slow
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360f8cf000000030101005c6b6a0f0000000049454e44ae426082"
)
PAGES_PER_CHAT = 16  # channels/web/live.py


@dataclass
class Owner:
    """A logged-in owner's requests, over plain HTTP."""

    port: int
    cookie: str

    def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
        sent = {"Cookie": self.cookie, **(headers or {})}
        connection.request(method, path, body=body or None, headers=sent)
        response = connection.getresponse()
        data = response.read()
        connection.close()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data

    def csrf(self, conversation: str) -> str:
        _, _, page = self.request("GET", conversation)
        found = re.search(rb'data-csrf="([0-9a-f]+)"', page)
        assert found is not None, page[:500]
        return found.group(1).decode()

    def send(
        self, conversation: str, fields: list[tuple[str, str, bytes]], text: str = ""
    ) -> tuple[int, bytes]:
        boundary = secrets.token_hex(8)
        parts = [(b'name="text"', text.encode())]
        parts += [
            (f'name="{name}"; filename="{file}"'.encode(), data) for name, file, data in fields
        ]
        body = b"".join(
            b"--%s\r\nContent-Disposition: form-data; %s\r\n\r\n%s\r\n"
            % (boundary.encode(), head, data)
            for head, data in parts
        )
        body += b"--%s--\r\n" % boundary.encode()
        headers = {
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "X-CSRF-Token": self.csrf(conversation),
        }
        status, _, data = self.request("POST", f"{conversation}/send", body, headers)
        return status, data


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    home: Home = onboarded(tmp_path_factory, "web-chat-attacks")
    with FakeOpenAI() as llm, web_gateway(home, llm, NANOMEM_WEB__MAX_UPLOAD_MB="1") as running:
        yield running


@pytest.fixture(scope="module")
def owner(gateway: GatewayProcess) -> Owner:
    connection = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=20)
    body = urllib.parse.urlencode({"token": WEB_TOKEN})
    connection.request(
        "POST", "/login", body, {"Content-Type": "application/x-www-form-urlencoded"}
    )
    response = connection.getresponse()
    cookie = response.getheader("Set-Cookie") or ""
    assert response.status == 303 and cookie
    return Owner(gateway.port, cookie.split(";", 1)[0])


def conversation() -> str:
    return "/chat/c/web%3A" + secrets.token_urlsafe(12)


def media(gateway: GatewayProcess) -> list[str]:
    folder = gateway.home.workspace / "media"
    return sorted(p.name for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_uploads_over_the_limit_or_not_what_they_claim_are_refused_and_nothing_kept(
    owner: Owner, gateway: GatewayProcess
) -> None:
    chat = conversation()
    before = media(gateway)
    big = PNG + b"\0" * (2**20 + 1)
    too_big = (413, b"That is more than 1 MB of files (web.max_upload_mb).")
    assert owner.send(chat, [("file", "big.png", big)]) == too_big
    halves = [("file", f"{n}.png", PNG + b"\0" * 2**19) for n in range(2)]
    assert owner.send(chat, halves) == too_big  # the limit is the message's, not each file's
    hostile = [
        ("page.png", b"<html><script>alert(1)</script></html>"),  # HTML named as an image
        ("x.svg", b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'),
        ("run.sh", b"#!/bin/sh\nrm -rf ~\n"),
        ("empty.pdf", b"%PD"),
    ]
    for name, data in hostile:
        status, said = owner.send(chat, [("file", name, data)])
        assert (status, said) == (415, b"Only images, PDFs and recordings can be sent here.")
    eleven = [("file", f"{n}.png", PNG) for n in range(11)]
    assert owner.send(chat, eleven) == (400, b"At most 10 files in one message.")
    assert media(gateway) == before
    assert not list(gateway.home.sessions.glob("web_*"))  # no message reached a session


def test_a_huge_message_is_refused_before_it_is_stored(
    owner: Owner, gateway: GatewayProcess
) -> None:
    chat = conversation()
    status, said = owner.send(chat, [], text="x" * 200_000)
    assert status == 400 and said.startswith(b"That message is too long (200000 characters")
    form = urllib.parse.urlencode({"text": "y" * 3_000_000}).encode()
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-CSRF-Token": owner.csrf(chat),
    }
    status, _, _ = owner.request("POST", f"{chat}/send", form, headers)
    assert status == 413
    assert not list(gateway.home.sessions.glob("web_*"))
    assert gateway.proc.poll() is None


def test_no_url_reaches_outside_its_conversation(owner: Owner, gateway: GatewayProcess) -> None:
    (gateway.home.root / "secret.txt").write_text("the owner's secret")
    climbing = [
        "/chat/c/..%2F..%2Fconfig.toml",
        "/chat/c/web%3A..%2F..%2Fconfig.toml",
        "/chat/c/web%3Ashort",  # not an id "New" makes
        "/chat/c/telegram%3A12345",  # no such session
        "/chat/c/%00",
        "/chat/c/" + "a" * 5000,
    ]
    for path in climbing:
        status, _, body = owner.request("GET", path)
        assert status == 404, path
        assert b"secret" not in body and b"Traceback" not in body
    chat = conversation()
    for file_id in ("..%2F..%2Fsecret.txt", "A" * 32, "..", "%2e%2e"):
        status, _, body = owner.request("GET", f"{chat}/files/{file_id}/secret.txt")
        assert status == 404, file_id
        assert b"the owner's secret" not in body


def test_other_channels_conversations_take_nothing_typed_here(
    owner: Owner, gateway: GatewayProcess
) -> None:
    (gateway.home.sessions).mkdir(exist_ok=True)
    chat = conversation()
    csrf = owner.csrf(chat)
    headers = {"Content-Type": "application/x-www-form-urlencoded", "X-CSRF-Token": csrf}
    for path in ("/chat/c/telegram%3A42/send", "/chat/c/api%3Aowner/press"):
        status, _, _ = owner.request("POST", path, b"text=hi&command=%2Fstop", headers)
        assert status in (403, 404), path
    status, _, _ = owner.request("POST", f"{chat}/send", b"text=no+token")  # no CSRF token
    assert status == 403
    forged = {**headers, "X-CSRF-Token": "0" * 64}
    assert owner.request("POST", f"{chat}/press", b"command=%2Fstop", forged)[0] == 403
    press = b"command=not-a-command"
    assert owner.request("POST", f"{chat}/press", press, headers)[0] == 400


def test_a_flood_of_event_streams_is_bounded(owner: Owner, gateway: GatewayProcess) -> None:
    chat = conversation()
    opened: list[http.client.HTTPConnection] = []
    statuses = []
    try:
        for _ in range(PAGES_PER_CHAT + 4):
            connection = http.client.HTTPConnection("127.0.0.1", owner.port, timeout=20)
            connection.request("GET", f"{chat}/events?after=0", headers={"Cookie": owner.cookie})
            response = connection.getresponse()  # the status line and headers only
            statuses.append(response.status)
            opened.append(connection)
    finally:
        for connection in opened:
            connection.close()
    assert statuses[:PAGES_PER_CHAT] == [200] * PAGES_PER_CHAT
    assert statuses[PAGES_PER_CHAT:] == [429] * 4
    status, health = gateway.health()  # the gateway answers on
    assert status == 200, health
    again = http.client.HTTPConnection("127.0.0.1", owner.port, timeout=20)
    for _ in range(50):  # the closed ones are let go: a page can open again
        again.request("GET", f"{chat}/events?after=0", headers={"Cookie": owner.cookie})
        response = again.getresponse()
        if response.status == 200:
            break
        response.read()
    again.close()
    assert response.status == 200
