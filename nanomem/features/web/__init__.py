"""The web: `web_fetch` and `web_search`, behind an address guard."""

from typing import TYPE_CHECKING

from nanomem.exports import lazy_exports

if TYPE_CHECKING:
    from nanomem.features.web.client import NOT_WEB, Page, WebClient, WebError
    from nanomem.features.web.feature import Web, build, search_provider
    from nanomem.features.web.guard import AddressGuard, Refused, why_blocked
    from nanomem.features.web.resolver import GuardedResolver
    from nanomem.features.web.search import Result, parse_duckduckgo

__all__ = [
    "NOT_WEB",
    "AddressGuard",
    "GuardedResolver",
    "Page",
    "Refused",
    "Result",
    "Web",
    "WebClient",
    "WebError",
    "build",
    "parse_duckduckgo",
    "search_provider",
    "why_blocked",
]
__getattr__ = lazy_exports(
    __name__,
    {
        "client": ("NOT_WEB", "Page", "WebClient", "WebError"),
        "feature": ("Web", "build", "search_provider"),
        "guard": ("AddressGuard", "Refused", "why_blocked"),
        "resolver": ("GuardedResolver",),
        "search": ("Result", "parse_duckduckgo"),
    },
)
