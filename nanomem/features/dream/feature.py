"""Dream as a feature: its runs on a schedule and the owner told of a change waiting for them
(background work), the memory commands that show, undo and decide its changes (/dream,
/dream-log, /dream-restore, /dream-approve, /dream-reject) and trace a line's origin (/why),
and its last run in GET /health."""

from __future__ import annotations

from collections.abc import Mapping

from nanomem.agent import Command, Core, Feature, HealthReport, Reach
from nanomem.features.dream.commands import MemoryCommands
from nanomem.features.dream.dream import Dream
from nanomem.features.dream.notice import ReviewNotice
from nanomem.features.dream.provenance import Provenance
from nanomem.features.dream.scheduler import DreamScheduler


class Dreaming(Feature):
    name = "dream"

    def __init__(self, dream: Dream, scheduler: DreamScheduler, provenance: Provenance) -> None:
        self.dream, self.scheduler, self.provenance = dream, scheduler, provenance
        self.notice = ReviewNotice(dream)

    def commands(self) -> list[Command]:
        return [*MemoryCommands(self.dream, self.dream.git).commands(), *self.provenance.commands()]

    def health(self) -> Mapping[str, HealthReport]:
        return {"last_dream": HealthReport(self.dream.last_run())}

    async def start(self, reach: Reach) -> None:
        self.scheduler.start()  # in the gateway, and while `nanomem chat` is open
        if reach.owner is not None:  # `nanomem chat` shows a waiting change as it opens
            self.notice.start(reach.owner)

    async def stop(self, grace_s: float) -> None:
        await self.notice.stop()
        await self.scheduler.stop(grace_s=grace_s)  # a running Dream may finish, too


def build(core: Core) -> Dreaming:
    settings = core.settings
    provider = core.provider
    if settings.dream.model_override:
        provider = core.model(
            settings.llm.model_copy(update={"model": settings.dream.model_override})
        )
    home = core.home
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
    scheduler = DreamScheduler(dream, core.history, settings.dream)
    return Dreaming(dream, scheduler, Provenance(core.git, core.history, groups_see_personal))
