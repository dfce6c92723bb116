"""Background tasks as a feature: the record under the home, `/stop <id>` through the core."""

from __future__ import annotations

from nanomem.agent import Core
from nanomem.features.tasks.background import BackgroundTasks
from nanomem.features.tasks.records import TaskStore


def build(core: Core) -> BackgroundTasks | None:
    limit = core.settings.agent.max_background_tasks
    if limit == 0:  # switched off: no `spawn` for the model
        return None
    home = core.home
    tasks = BackgroundTasks(
        TaskStore(home.tasks, home.lock("tasks"), home.locks),
        loop=core.loop,
        sessions=core.sessions,
        context=core.context,
        provider=core.provider,
        tools=core.tools,
        templates=core.templates,
        bus=core.bus,
        limit=limit,
        max_iterations=core.settings.agent.max_iterations,
    )
    core.loop.stop_named.append(tasks.stop_named)
    return tasks
