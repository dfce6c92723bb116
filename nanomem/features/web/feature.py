"""The web as a feature (tools.web.enabled): `web_fetch` reads a page, `web_search` finds them.

What they bring back is someone else's text: it reaches the model inside `untrusted()` markers,
and the prompt section says what those mean.
"""

from __future__ import annotations

from nanomem.agent import Core, Feature
from nanomem.config import SEARCH_ENDPOINTS, DocumentSettings, WebSettings
from nanomem.features.web.client import WebClient, WebError
from nanomem.features.web.guard import AddressGuard
from nanomem.features.web.search import Brave, DuckDuckGo, SearchProvider, SearXNG, Tavily
from nanomem.tools import PROMPT_SECTION, Tool, ToolError, read_only_tool, untrusted

MAX_RESULTS = 10


class Web(Feature):
    name = "web"

    def __init__(
        self,
        client: WebClient,
        search: SearchProvider,
        max_output_chars: int,
        documents: DocumentSettings | None = None,
    ) -> None:
        self.client, self.provider, self.max_output_chars = client, search, max_output_chars
        self.documents = documents or DocumentSettings()  # the limits a PDF is read within

    def tools(self) -> list[Tool]:
        return [Tool.from_function(self.web_fetch), Tool.from_function(self.web_search)]

    def prompt_section(self) -> str:
        return PROMPT_SECTION

    @read_only_tool
    async def web_fetch(self, url: str) -> str:
        """Read a web page (or text, JSON, PDF) at an http(s) URL, as Markdown text."""
        from nanomem.features.web.extract import readable

        try:
            page = await self.client.request("GET", url.strip())
            found = await readable(page, self.max_output_chars, self.documents)
        except WebError as exc:
            raise ToolError(f"web_fetch {url}: {exc}") from None
        head = [f"Title: {found.title}" if found.title else "", f"URL: {page.url}"]
        notes = []
        if page.status >= 400:
            notes.append(f"[the server answered HTTP {page.status}: this is its error page]")
        if page.cut:
            notes.append(
                f"[cut: only the first {len(page.body)} bytes were read (tools.web.max_bytes)]"
            )
        return self._framed(page.url, "\n".join(filter(None, head)), found.text, notes)

    @read_only_tool
    async def web_search(self, query: str, count: int = 5) -> str:
        """Search the web; numbered results with title, URL and snippet (count: 1-10)."""
        count = min(max(count, 1), MAX_RESULTS)
        try:
            results = await self.provider.search(query, count)
        except WebError as exc:
            raise ToolError(f"web_search: {exc}") from None
        if not results:
            return f"No results for {query!r} ({self.provider.name})."
        lines = [f"Results for {query!r} ({self.provider.name}):"]
        for number, result in enumerate(results, start=1):
            lines += [f"{number}. {result.title or result.url}", f"   {result.url}"]
            if result.snippet:
                lines.append(f"   {result.snippet}")
        return untrusted(f"web search ({self.provider.name})", "\n".join(lines))

    def _framed(self, source: str, head: str, text: str, notes: list[str]) -> str:
        """Cut the text, not the frame: the registry's own cut would drop the end marker."""
        room = self.max_output_chars - len(untrusted(source, head + "\n\n")) - 200
        room -= sum(len(note) + 1 for note in notes)
        if len(text) > room:
            text = text[: max(room, 0)]
            notes.append(f"[cut: the text goes on past tools.max_output_chars ({room} shown)]")
        return "\n".join([untrusted(source, f"{head}\n\n{text}"), *notes])


def search_provider(settings: WebSettings, client: WebClient) -> SearchProvider:
    """The configured provider. SearXNG's URL is the owner's own choice (often on the LAN),
    so it is reached without the address guard; the others' endpoints go through it."""
    chosen = settings.search_provider
    base = settings.search_base_url or SEARCH_ENDPOINTS.get(chosen, "")
    if chosen == "brave" and settings.brave_api_key is not None:
        return Brave(client, base, settings.brave_api_key.get_secret_value())
    if chosen == "tavily" and settings.tavily_api_key is not None:
        return Tavily(client, base, settings.tavily_api_key.get_secret_value())
    if chosen == "searxng" and settings.searxng_url is not None:
        own = WebClient(
            AddressGuard(allow_private=True),
            max_bytes=settings.max_bytes,
            max_redirects=0,
            timeout_s=settings.timeout_s,
        )
        return SearXNG(own, settings.searxng_url)
    return DuckDuckGo(client, base)


def build(core: Core) -> Web | None:
    settings = core.settings.tools.web
    if not settings.enabled:
        return None
    client = WebClient(
        AddressGuard(allow_private=settings.allow_private, allow_networks=settings.allow_networks),
        max_bytes=settings.max_bytes,
        max_redirects=settings.max_redirects,
        timeout_s=settings.timeout_s,
    )
    tools = core.settings.tools
    return Web(client, search_provider(settings, client), tools.max_output_chars, tools.documents)
