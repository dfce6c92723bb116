"""Dream as a feature: its runs on a schedule and the owner told of a change waiting for them
(background work), the memory commands that show, undo and decide its changes (/dream,
/dream-log, /dream-restore, /dream-approve, /dream-reject) and trace a line's origin (/why),
and its last run in GET /health.

Its machinery (Dream, its scheduler, review and provenance, difflib) is built when first used:
by a command, GET /health or its start in the gateway and `nanomem chat`; a one-shot turn of
text never loads it (issue 30 #7)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nanomem.agent import Command, Core, Feature, HealthReport, Reach

if TYPE_CHECKING:
    from nanomem.features.dream.dream import Dream
    from nanomem.features.dream.notice import ReviewNotice
    from nanomem.features.dream.provenance import Provenance
    from nanomem.features.dream.scheduler import DreamScheduler
    from nanomem.providers import Provider


@dataclass(frozen=True)
class Machinery:
    dream: Dream
    scheduler: DreamScheduler
    provenance: Provenance
    notice: ReviewNotice


class Dreaming(Feature):
    name = "dream"

    def __init__(self, make: Callable[[], Machinery]) -> None:
        self._make = make

    @functools.cached_property
    def machinery(self) -> Machinery:
        return self._make()

    @property
    def dream(self) -> Dream:
        return self.machinery.dream

    @property
    def scheduler(self) -> DreamScheduler:
        return self.machinery.scheduler

    @property
    def provenance(self) -> Provenance:
        return self.machinery.provenance

    @property
    def notice(self) -> ReviewNotice:
        return self.machinery.notice

    def commands(self) -> list[Command]:
        from nanomem.features.dream.commands import MemoryCommands

        return [*MemoryCommands(self.dream, self.dream.git).commands(), *self.provenance.commands()]

    def health(self) -> Mapping[str, HealthReport]:
        return {"last_dream": HealthReport(self.dream.last_run())}

    async def start(self, reach: Reach) -> None:
        self.scheduler.start()  # in the gateway, and while `nanomem chat` is open
        if reach.owner is not None:  # `nanomem chat` shows a waiting change as it opens
            self.notice.start(reach.owner)

    async def stop(self, grace_s: float) -> None:
        if "machinery" not in self.__dict__:
            return  # never built: nothing runs
        await self.notice.stop()
        await self.scheduler.stop(grace_s=grace_s)  # a running Dream may finish, too


def build(core: Core) -> Dreaming:
    settings = core.settings
    provider = core.provider
    if settings.dream.model_override:
        provider = core.model(
            settings.llm.model_copy(update={"model": settings.dream.model_override})
        )
    return Dreaming(functools.partial(_machinery, core, provider))


def _machinery(core: Core, provider: Provider) -> Machinery:
    from nanomem.features.dream.dream import Dream
    from nanomem.features.dream.notice import ReviewNotice
    from nanomem.features.dream.provenance import Provenance
    from nanomem.features.dream.scheduler import DreamScheduler

    settings, home = core.settings, core.home
    groups_see_personal = settings.memory.groups_see_personal
    dream = Dream(
        history=core.history,
        git=core.git,
        provider=provider,
        templates=core.templates,
        workspace=core.workspace,
        settings=settings.dream,
        state_path=home.dream_state,
        lock=home.lock("dream"),
        journal_path=home.dream_journal,
        groups_see_personal=groups_see_personal,
    )
    return Machinery(
        dream,
        DreamScheduler(dream, core.history, settings.dream),
        Provenance(core.git, core.history, groups_see_personal),
        ReviewNotice(dream),
    )
