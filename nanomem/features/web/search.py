"""web_search's providers: DuckDuckGo's HTML page (no key), Brave, Tavily and SearXNG's APIs.

Each answers with results (title, URL, snippet) or raises WebError with a short reason; a
key is sent in a header and never appears in an error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from nanomem.features.web.client import Page, WebClient, WebError
from nanomem.pools import SEARCH

TAGS = re.compile(r"<[^>]+>")
# What DuckDuckGo's bot check page holds instead of results.
BOT_CHECK = (b"anomaly-modal", b"challenge-form")


@dataclass(frozen=True)
class Result:
    title: str
    url: str
    snippet: str


class SearchProvider(Protocol):
    name: str

    async def search(self, query: str, count: int) -> list[Result]: ...


def _plain(text: object) -> str:
    """One line of text from a snippet that may hold <strong> tags and entities."""
    import html

    return " ".join(html.unescape(TAGS.sub("", str(text or ""))).split())


def _checked(page: Page, provider: str) -> Page:
    status = page.status
    if status in (401, 403):
        raise WebError(f"{provider} refused the request ({status}): check its API key")
    if status == 429:
        raise WebError(f"{provider} is rate limiting searches (429): try again later")
    if status >= 500:
        raise WebError(f"{provider} failed ({status}): try again later")
    if status >= 400:
        raise WebError(f"{provider} did not take the search ({status})")
    return page


def _json_of(page: Page, provider: str) -> dict[str, Any]:
    try:
        data = json.loads(page.text())
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        raise WebError(f"{provider} answered with something other than search results")
    return data


def _results(items: object, snippet_key: str, count: int) -> list[Result]:
    if not isinstance(items, list):
        return []
    found = [
        Result(_plain(item.get("title")), str(item["url"]), _plain(item.get(snippet_key)))
        for item in items
        if isinstance(item, dict) and isinstance(item.get("url"), str)
    ]
    return found[:count]


class Brave:
    name = "Brave"

    def __init__(self, client: WebClient, base_url: str, key: str) -> None:
        self.client, self.base_url, self.key = client, base_url.rstrip("/"), key

    async def search(self, query: str, count: int) -> list[Result]:
        from yarl import URL

        url = URL(f"{self.base_url}/res/v1/web/search").with_query(q=query, count=count)
        page = await self.client.request(
            "GET",
            str(url),
            headers={"Accept": "application/json", "X-Subscription-Token": self.key},
            follow=False,
        )
        data = _json_of(_checked(page, self.name), self.name)
        web = data.get("web")
        return _results(web.get("results") if isinstance(web, dict) else None, "description", count)


class Tavily:
    name = "Tavily"

    def __init__(self, client: WebClient, base_url: str, key: str) -> None:
        self.client, self.base_url, self.key = client, base_url.rstrip("/"), key

    async def search(self, query: str, count: int) -> list[Result]:
        page = await self.client.request(
            "POST",
            f"{self.base_url}/search",
            headers={"Authorization": f"Bearer {self.key}"},
            json={"query": query, "max_results": count, "search_depth": "basic"},
            follow=False,
        )
        data = _json_of(_checked(page, self.name), self.name)
        return _results(data.get("results"), "content", count)


class SearXNG:
    name = "SearXNG"

    def __init__(self, client: WebClient, base_url: str) -> None:
        self.client, self.base_url = client, base_url.rstrip("/")

    async def search(self, query: str, count: int) -> list[Result]:
        from yarl import URL

        url = URL(f"{self.base_url}/search").with_query(q=query, format="json")
        page = await self.client.request("GET", str(url), follow=False)
        if page.status == 403:  # SearXNG's answer when the json format is not enabled
            raise WebError(
                'SearXNG refused JSON (403): add "json" to search.formats in its settings.yml'
            )
        data = _json_of(_checked(page, self.name), self.name)
        return _results(data.get("results"), "content", count)


class DuckDuckGo:
    """The HTML endpoint for browsers without JavaScript: results as `div.result` blocks."""

    name = "DuckDuckGo"

    def __init__(self, client: WebClient, base_url: str) -> None:
        self.client, self.base_url = client, base_url

    async def search(self, query: str, count: int) -> list[Result]:
        page = await self.client.request("POST", self.base_url, data={"q": query, "b": ""})
        if page.status == 202 or any(mark in page.body for mark in BOT_CHECK):
            # DuckDuckGo's answer to a client it takes for a bot: a challenge, not results
            raise WebError("DuckDuckGo blocked the search (a bot check): try again later")
        _checked(page, self.name)
        found = await SEARCH.run(parse_duckduckgo, page.text(), count)  # off the loop
        if not found and b"no-results" not in page.body:
            raise WebError(
                "DuckDuckGo's answer held no results nanomem could read (its page may have "
                "changed): try another tools.web.search_provider"
            )
        return found


def parse_duckduckgo(html: str, count: int) -> list[Result]:
    """Results from DuckDuckGo's HTML page; an empty list for its "No results." page."""
    import lxml.html  # lazily: installed with trafilatura

    if not html.strip():
        return []
    document = lxml.html.fromstring(html)
    found: list[Result] = []
    for block in document.xpath('//div[contains(concat(" ", @class, " "), " result ")]'):
        if "result--ad" in (block.get("class") or ""):
            continue
        links = block.xpath('.//a[contains(@class, "result__a")]')
        if not links:
            continue
        url = _target(links[0].get("href") or "")
        if not url:
            continue
        snippet = block.xpath('.//*[contains(@class, "result__snippet")]')
        found.append(
            Result(
                " ".join(links[0].text_content().split()),
                url,
                " ".join(snippet[0].text_content().split()) if snippet else "",
            )
        )
        if len(found) >= count:
            break
    return found


def _target(href: str) -> str:
    """The result's own address: DuckDuckGo wraps it in //duckduckgo.com/l/?uddg=<url>."""
    parts = urlsplit(href if "://" in href else f"https:{href}" if href.startswith("//") else href)
    if parts.path.startswith("/l/"):
        return parse_qs(parts.query).get("uddg", [""])[0]
    return href if parts.scheme in ("http", "https") else ""
