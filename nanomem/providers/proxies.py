"""Which proxy, if any, a request to a URL goes through: the one decision that routing.py
explains (`nanomem status`) and connection.py acts on (connecting).

The usual variables, as curl, httpx and litellm read them: `https_proxy` for https:// URLs,
`http_proxy` for http:// ones, `all_proxy` for both, each lowercase first; `no_proxy`
excludes hosts; a loopback host is never proxied. A proxy URL without a scheme is http://.
The lean client (httpcore) speaks `http://`, `https://`, `socks5://` and `socks5h://` proxies;
any other scheme (socks4://...) is `usable = False`.
Cheap to import: urllib.request is loaded only when a proxy variable is set.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from nanomem.config import is_loopback

SPOKEN = ("http", "https", "socks5", "socks5h")  # the proxy schemes httpcore (with socksio) speaks


@dataclass(frozen=True)
class Proxy:
    """A proxy from the environment; `shown` and `repr` never hold its credentials."""

    variable: str  # where it was found, e.g. HTTPS_PROXY or llm.proxy
    scheme: str
    host: str
    port: int
    # The user and password of the URL (percent-decoded), when it holds a user.
    credentials: tuple[str, str] | None = field(default=None, repr=False)

    @property
    def usable(self) -> bool:
        return self.scheme in SPOKEN and bool(self.host)

    @property
    def address(self) -> str:
        """host:port, for error messages."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def shown(self) -> str:
        """scheme://host:port: the URL to connect to, without the credentials."""
        return f"{self.scheme}://{self.address}"

    @property
    def problem(self) -> str:
        """Why the lean client cannot use it (for routing's reason)."""
        if not self.host:
            return f"{self.variable} is not a proxy URL the lean client understands"
        return f"{self.variable} is a {self.scheme}:// proxy, which the lean client does not speak"


def proxy_for(url: str, configured: str | None = None) -> Proxy | None:
    """The proxy a request to `url` goes through, or None to connect directly. `configured`
    (llm.proxy) wins over the environment and applies to every host but this machine's own."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if configured:
        return None if is_loopback(host) else _parse("llm.proxy", configured)
    for name in (f"{parts.scheme or 'https'}_proxy", "all_proxy"):
        for variable in (name, name.upper()):
            if value := os.environ.get(variable, "").strip():
                if is_loopback(host):
                    return None  # a proxy cannot reach this machine's own servers
                # Loaded only when a proxy is set: `nanomem chat` starts without it.
                from urllib.request import proxy_bypass

                return None if proxy_bypass(host) else _parse(variable, value)
    return None


def _parse(variable: str, value: str) -> Proxy:
    if "://" not in value:
        value = f"http://{value}"  # "proxy:3128", as curl and httpx take it
    parts = urlsplit(value)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or (443 if scheme == "https" else 1080 if "socks" in scheme else 80)
    except ValueError:  # a port that is not a number: unusable, and said so
        return Proxy(variable, scheme, "", 0)
    credentials = None
    if parts.username is not None:
        credentials = unquote(parts.username), unquote(parts.password or "")
    return Proxy(variable, scheme, parts.hostname or "", port, credentials)
