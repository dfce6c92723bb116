"""The guard inside aiohttp's name lookup: the addresses checked are the ones connected to."""

from __future__ import annotations

import socket

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver

from nanomem.features.web.guard import AddressGuard


class GuardedResolver(AbstractResolver):
    """Resolves with `inner` (the system's resolver by default) and refuses the whole name
    when any address it has is refused: a request never races between good and bad ones."""

    def __init__(self, guard: AddressGuard, inner: AbstractResolver | None = None) -> None:
        self.guard = guard
        self.inner = inner if inner is not None else ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.guard.check_host(host)
        results = await self.inner.resolve(host, port, family)
        for result in results:
            self.guard.check_address(result["host"], host)
        return results

    async def close(self) -> None:
        await self.inner.close()
