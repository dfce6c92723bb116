"""The Memory, Timeline and Dream review pages under attack, over plain HTTP against the real
gateway: a forged edit, an edit through a planted link, a made-up version, a huge edit, a page
range that would load the whole history. Each is refused with a clear answer, and nothing in
the memory changes."""

from __future__ import annotations

import http.cookiejar
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest

from nanomem.home import Home
from nanomem.memory import GitStore
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.browser import WEB_TOKEN, base_url, web_gateway
from tests.helpers.gateway import onboarded

pytestmark = pytest.mark.slow


class Owner:
    """A logged-in browser, as plain HTTP: the session cookie, and the CSRF token a page holds."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        )
        self.call("POST", "/login", {"token": WEB_TOKEN})
        _, page = self.call("GET", "/memory")
        found = re.search(r'name="csrf" value="([^"]+)"', page)
        assert found is not None, page
        self.csrf = found.group(1)

    def call(
        self,
        method: str,
        path: str,
        form: dict[str, str] | None = None,
        *,
        csrf: bool = False,
        raw: bytes | None = None,
    ) -> tuple[int, str]:
        data = raw if raw is not None else urllib.parse.urlencode(form).encode() if form else None
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        if csrf:
            headers["X-CSRF-Token"] = self.csrf
        request = urllib.request.Request(
            f"{self.base}{path}", data=data, headers=headers, method=method
        )
        try:
            with self.opener.open(request, timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()


class Memory:
    def __init__(self, home: Home) -> None:
        self.home = home
        self.git = GitStore(home.memory_git, home.workspace, lock=home.lock("memory"))

    def state(self) -> tuple[str | None, dict[str, bytes]]:
        files = {
            rel: (self.home.workspace / rel).read_bytes()
            for rel in ("SOUL.md", "USER.md", "memory/MEMORY.md")
        }
        return self.git.head_sha(), files


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Owner, Memory]]:
    home = onboarded(tmp_path_factory, "web-memory-attacks")
    with FakeOpenAI() as llm, web_gateway(home, llm) as gateway:
        yield Owner(base_url(gateway)), Memory(home)


def edit_form(owner: Owner, text: str, summary: str = "x") -> dict[str, str]:
    _, form = owner.call("GET", "/memory/edit?file=USER.md")
    base = re.search(r'name="base" value="([^"]*)"', form)
    seen = re.search(r'name="seen" value="([^"]*)"', form)
    assert base is not None and seen is not None, form
    return {
        "file": "USER.md",
        "text": text,
        "summary": summary,
        "base": base.group(1),
        "seen": seen.group(1),
    }


def test_an_edit_without_the_csrf_token_is_refused(served: tuple[Owner, Memory]) -> None:
    owner, memory = served
    before = memory.state()
    form = edit_form(owner, "# User\n- planted by another site\n")
    status, said = owner.call("POST", "/memory/edit", form)  # a cross-site form: no token
    assert status == 403 and "expired" in said
    status, _ = owner.call("POST", "/memory/edit", form | {"csrf": "0" * 64})
    assert status == 403
    assert memory.state() == before


def test_an_edit_through_a_planted_link_is_refused_as_the_file_tools_refuse_it(
    served: tuple[Owner, Memory],
) -> None:
    owner, memory = served
    user = memory.home.workspace / "USER.md"
    kept = user.read_bytes()
    secret = memory.home.config  # what a link planted by a shell command would aim at
    secret_before = secret.read_bytes()
    form = edit_form(owner, "pwned\n")
    for plant in (os.symlink, os.link):
        user.unlink()
        plant(secret, user)
        try:
            status, said = owner.call("POST", "/memory/edit", form, csrf=True)
            assert status in (400, 409), said
            assert "link" in said and "nothing was" in said.lower()
            status, page = owner.call("GET", "/memory")
            assert status == 409 and "link" in page
            assert "api_key" not in page and "[llm]" not in page  # the target never shown
            status, why = owner.call("GET", "/memory/why?file=USER.md&line=1&h=x")
            assert status == 409 and "[llm]" not in why
        finally:
            user.unlink()
            user.write_bytes(kept)
        assert secret.read_bytes() == secret_before


def test_a_made_up_version_restores_nothing(served: tuple[Owner, Memory]) -> None:
    owner, memory = served
    before = memory.state()
    for sha, said in [
        ("deadbeef", "No memory version starts with deadbeef."),
        ("0" * 40, "No memory version starts with 0000000000000000000000000000000000000000."),
        ("xyz!", "is not a version id"),
        ("%2e%2e%2fconfig.toml", "is not a version id"),
    ]:
        status, text = owner.call("POST", f"/timeline/restore/{sha}", {}, csrf=True)
        assert status == 404 and said in text, (sha, text)
        status, text = owner.call("GET", f"/timeline/v/{sha}")
        assert status == 404
    assert memory.state() == before


def test_a_huge_edit_is_refused_and_nothing_changes(served: tuple[Owner, Memory]) -> None:
    owner, memory = served
    before = memory.state()
    form = edit_form(owner, "- fact\n" * 500_000)  # 3.5 MB
    status, said = owner.call("POST", "/memory/edit", form, csrf=True)
    assert status == 413 and "larger than the web app takes" in said
    assert memory.state() == before


def test_no_page_range_loads_the_whole_history(served: tuple[Owner, Memory]) -> None:
    owner, _ = served
    for page in ("0", "-1", "10001", "99999999999999999999", "1e9", "all", ""):
        status, said = owner.call("GET", f"/timeline?page={urllib.parse.quote(page)}")
        assert status == 400 and "a number from 1 to 10000" in said, page
    status, said = owner.call("GET", "/timeline?page=10000&limit=1000000&per_page=1000000")
    assert status == 200 and "<article" not in said  # far past the history: nothing to show


def test_why_of_a_file_that_is_no_memory_file_is_refused(served: tuple[Owner, Memory]) -> None:
    owner, _ = served
    for file in ("../config.toml", "/etc/passwd", "SOUL.md/../../config.toml", "HEARTBEAT.md"):
        status, said = owner.call("GET", f"/memory/why?file={urllib.parse.quote(file)}&line=1")
        assert status == 400 and "not a memory file" in said, file
    status, said = owner.call("GET", "/memory/why?file=USER.md&line=99999&h=0")
    assert status == 409 and "changed since the page was loaded" in said


def test_a_made_up_review_decision_changes_nothing(served: tuple[Owner, Memory]) -> None:
    owner, memory = served
    before = memory.state()
    status, said = owner.call(
        "POST", "/review", {"decision": "approve", "id": "deadbeef"}, csrf=True
    )
    assert status == 409 and "No memory change is waiting" in said
    status, said = owner.call(
        "POST", "/review", {"decision": "reject", "id": "x", "reason": "r" * 1001}, csrf=True
    )
    assert status == 400 and "longer than 1,000 characters" in said
    status, said = owner.call("POST", "/review", {"decision": "approve"})  # no token
    assert status == 403
    assert memory.state() == before
