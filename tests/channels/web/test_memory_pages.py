"""The Memory, Timeline and Dream review pages' handlers in this process (aiohttp's test
server, a scripted model, real dulwich): what each answers when things are not as the page
last showed them. The browser tests (test_web_memory_browser.py) show the rest in Chromium."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from aiohttp import CookieJar, web
from aiohttp.test_utils import TestClient, TestServer

from channels.web.channel import WebChannel
from nanomem.app import App
from nanomem.features.dream import Dreaming
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider
from tests.helpers.browser import WEB_TOKEN
from tests.helpers.dream import LEARN, USER_BEFORE, app_with_history


@dataclass
class Served:
    app: App
    client: TestClient  # type: ignore[type-arg]
    csrf: str


@pytest.fixture
async def served(home: Home) -> AsyncIterator[Served]:
    (home.workspace / "USER.md").write_text(USER_BEFORE)
    web_section = {"enabled": True, "token": WEB_TOKEN}
    app = await app_with_history(
        home, ScriptedProvider(list(LEARN)), web=web_section, dream={"review": "ask"}
    )
    web_app = web.Application()
    WebChannel.from_app(app).routes(web_app)
    async with TestClient(TestServer(web_app), cookie_jar=CookieJar(unsafe=True)) as client:
        await client.post("/login", data={"token": WEB_TOKEN}, allow_redirects=False)
        page = await (await client.get("/review")).text()
        found = re.search(r'name="csrf" value="([^"]+)"', page)
        assert found is not None, page
        yield Served(app, client, found.group(1))


async def post(served: Served, path: str, form: dict[str, str]) -> tuple[int, str]:
    headers = {"X-CSRF-Token": served.csrf}
    response = await served.client.post(path, data=form, headers=headers)
    return response.status, await response.text()


async def test_nothing_waiting_says_so_and_links_the_timeline(served: Served) -> None:
    response = await served.client.get("/review")
    text = await response.text()
    assert response.status == 200
    assert "No memory change is waiting for a decision" in text and 'href="/timeline"' in text


async def test_a_change_that_no_longer_applies_is_dropped_and_said_so(served: Served) -> None:
    dream = served.app.feature(Dreaming).dream
    result = await dream.run()
    assert result.pending is not None
    page = await (await served.client.get("/review")).text()
    assert "Waiting for your decision" in page and "+- Name: Ada" in page
    (served.app.workspace / "USER.md").write_text("# Someone else\n")  # meanwhile, by hand
    status, said = await post(served, "/review", {"decision": "approve", "id": result.pending.id})
    assert status == 409
    assert "no longer apply; it was dropped" in said
    assert "elsewhere" not in said  # the review dropped it: nobody decided it elsewhere
    assert (served.app.workspace / "USER.md").read_text() == "# Someone else\n"


async def test_approve_here_then_again_is_decided_once(served: Served) -> None:
    result = await served.app.feature(Dreaming).dream.run()
    assert result.pending is not None
    change = result.pending.id
    status, said = await post(served, "/review", {"decision": "approve", "id": change})
    assert status == 200 and f"Approved {change}: saved as version" in said
    versions = len(served.app.git.log(limit=100))
    status, said = await post(served, "/review", {"decision": "reject", "id": change})
    assert status == 409 and f"Change {change} was already approved" in said
    assert len(served.app.git.log(limit=100)) == versions


async def test_the_first_version_offers_no_restore_and_refuses_one(served: Served) -> None:
    (first,) = served.app.git.log()
    page = await (await served.client.get("/timeline")).text()
    assert f'id="v{first.sha}"' in page and "/timeline/restore/" not in page
    status, said = await post(served, f"/timeline/restore/{first.short}", {})
    assert status == 409 and "is the first version; there is nothing before it" in said


async def test_one_version_by_any_prefix(served: Served) -> None:
    (first,) = served.app.git.log()
    response = await served.client.get(f"/timeline/v/{first.sha[:6]}")
    text = await response.text()
    assert response.status == 200 and f"Version {first.short}" in text
    assert "initial memory" in text


async def test_why_of_a_heading_or_a_line_since_changed_asks_for_a_reload(served: Served) -> None:
    for query in ("file=USER.md&line=1&h=x", "file=USER.md&line=2&h=0000"):
        response = await served.client.get(f"/memory/why?{query}")
        assert response.status == 409
        assert "changed since the page was loaded" in await response.text()
    response = await served.client.get("/memory/why?file=USER.md&line=two")
    assert response.status == 400


async def test_the_restore_asks_first_naming_the_later_changes_it_undoes_too(
    served: Served,
) -> None:
    workspace, git = served.app.workspace, served.app.git
    changes = []
    for rel, text in [
        ("USER.md", "# User\n- Ada\n"),
        ("memory/MEMORY.md", "# Memory\n- Apollo\n"),
        ("USER.md", "# User\n- Ada\n- tea\n"),
    ]:
        (workspace / rel).write_text(text)
        changes.append(git.commit_manual_edits())
    first, memory, later = changes
    assert first is not None and memory is not None and later is not None
    response = await served.client.get(f"/timeline/restore/{first.sha}")
    page = await response.text()
    assert response.status == 200 and f"Restore version {first.short}?" in page
    listed = page[page.index('<ul class="later">') :].split("</ul>")[0]
    assert later.short in listed and memory.short not in listed
    assert git.log(limit=1)[0] == later  # asking changed nothing
    status, said = await post(served, f"/timeline/restore/{first.sha}", {})
    assert status == 200 and "later changes to the same files:" in said and later.short in said
    assert "Ada" not in (workspace / "USER.md").read_text()
    assert (workspace / "memory" / "MEMORY.md").read_text() == "# Memory\n- Apollo\n"
    newest = git.log(limit=1)[0]
    response = await served.client.get(f"/timeline/restore/{newest.sha}")
    assert "No later change touched these files." in await response.text()
