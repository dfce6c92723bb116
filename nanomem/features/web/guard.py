"""The address guard: web requests go to public addresses only (unless the owner allows more).

Checked after DNS resolution, on every address a name resolves to, inside aiohttp's resolver
(resolver.py): the connection is then made to exactly the addresses that were checked, so a
name cannot resolve to a public address for the check and to 127.0.0.1 for the connection (DNS
rebinding). Addresses written in the URL skip aiohttp's resolver and are checked before the
request (`check_host`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Names that mean "this machine" or a cloud's metadata service wherever they are resolved.
BLOCKED_NAMES = frozenset(
    {"localhost", "metadata", "metadata.google.internal", "instance-data", "kubernetes.default"}
)
# Suffixes reserved for private use: never a public site.
BLOCKED_SUFFIXES = (".localhost", ".internal", ".local", ".localdomain", ".home.arpa")
METADATA = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254")
)
CGNAT = ipaddress.ip_network("100.64.0.0/10")
NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))


class Refused(Exception):
    """A request the guard will not make; the message says why, for the model."""


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 form carries (mapped, 6to4, Teredo, NAT64, compatible)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if any(ip in net for net in NAT64):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if int(ip) >> 32 == 0 and int(ip) > 1:  # ::a.b.c.d, the deprecated "compatible" form
        return ipaddress.IPv4Address(int(ip))
    return None


def why_blocked(ip: Address) -> str | None:
    """What kind of non-public address `ip` is, or None for a public one."""
    if isinstance(ip, ipaddress.IPv6Address):
        inner = embedded_ipv4(ip)
        if inner is not None and (reason := why_blocked(inner)):
            return f"{reason} inside an IPv6 address"
    if ip in METADATA:
        return "a cloud metadata address"
    checks = (
        (ip.is_loopback, "a loopback address"),
        (ip.is_link_local, "a link-local address"),
        (ip.is_unspecified, "the unspecified address"),
        (ip.is_multicast, "a multicast address"),
        (isinstance(ip, ipaddress.IPv4Address) and ip in CGNAT, "a carrier-grade NAT address"),
        (ip.is_private, "a private address"),
        (ip.is_reserved, "a reserved address"),
        (not ip.is_global, "not a public address"),
    )
    return next((reason for hit, reason in checks if hit), None)


class AddressGuard:
    """Which hosts and addresses requests may reach."""

    def __init__(self, *, allow_private: bool = False, allow_networks: Iterable[str] = ()) -> None:
        self.allow_private = allow_private
        self.allowed: tuple[Network, ...] = tuple(
            ipaddress.ip_network(net, strict=False) for net in allow_networks
        )

    def check_address(self, address: str, host: str) -> None:
        """Raise Refused unless `address` (what `host` resolved to) may be reached."""
        if self.allow_private:
            return
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # fe80::1%eth0: the scope goes
        if any(ip in net for net in self.allowed):
            return
        if (reason := why_blocked(ip)) is not None:
            shown = host if host == address else f"{host} ({address})"
            raise Refused(
                f"{shown} is {reason}; web tools reach public addresses only "
                "(tools.web.allow_private)"
            )

    def check_host(self, host: str) -> None:
        """Before any lookup: names that mean this machine or a metadata service, and
        addresses written in the URL itself (aiohttp does not resolve those)."""
        if self.allow_private:
            return
        name = host.lower().rstrip(".").strip("[]")
        try:
            ipaddress.ip_address(name.split("%", 1)[0])
        except ValueError:
            if name in BLOCKED_NAMES or name.endswith(BLOCKED_SUFFIXES):
                raise Refused(
                    f"{host} names this machine or a private service; web tools reach public "
                    "addresses only (tools.web.allow_private)"
                ) from None
            return
        self.check_address(name, host)
