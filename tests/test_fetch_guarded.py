"""`fetch_guarded` (nanomem/app.py), the seam by which the agent API fetches an image URL: its
failures say why, never with the URL or a redirect's target (a query may carry a key). The
real web client against the loopback web server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nanomem.app import FetchFailed, fetch_guarded
from nanomem.config import WebSettings
from tests.fakes.web_server import FakeWeb

HOST = "127.0.0.2"  # opened by allow_networks, as a public address would be
KEY = "sk-secret-in-the-query"


@pytest.fixture(scope="module")
def site() -> Iterator[FakeWeb]:
    with FakeWeb(host=HOST) as web:
        web.serve(
            "/away.png", "", status=302, headers={"Location": f"ftp://files.example/x?key={KEY}"}
        )
        yield web


@pytest.fixture
def web() -> WebSettings:
    return WebSettings(allow_networks=[f"{HOST}/32"])


async def test_a_redirect_to_another_kind_of_address_is_refused_without_naming_it(
    site: FakeWeb, web: WebSettings
) -> None:
    with pytest.raises(FetchFailed) as failed:
        await fetch_guarded(web, site.url(f"/away.png?key={KEY}"), 1000)
    reason = str(failed.value)
    assert "only http:// and https:// addresses are fetched" in reason
    assert KEY not in reason and "files.example" not in reason
    paths = [path.partition("?")[0] for _, path, _, _ in site.requests]
    assert paths == ["/away.png"]  # asked once; the redirect not followed


@pytest.mark.parametrize(
    "url",
    [
        f"http://{HOST}:99999/photo.png?key={KEY}",  # no such port
        f"http://[::1/photo.png?key={KEY}",  # a broken IPv6 address
        f"http://a..b/photo.png?key={KEY}",  # an empty label in the name
    ],
)
async def test_a_url_no_one_could_reach_is_said_to_be_unusable_and_not_repeated(
    web: WebSettings, url: str
) -> None:
    with pytest.raises(FetchFailed) as failed:
        await fetch_guarded(web, url, 1000)
    assert str(failed.value) == "not a usable URL"
