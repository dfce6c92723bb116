"""A memory with weeks of Dream runs behind it (the Timeline's chart has days to draw): versions
made through GitStore, then given earlier times by writing the same commits again with those
times (git keeps whatever time a commit says)."""

from __future__ import annotations

import time

from dulwich.objects import Commit
from dulwich.repo import Repo

from nanomem.home import Home
from nanomem.memory import GitStore

DAY_S = 86_400
FACTS = [
    "- Works as a structural engineer in Quito",
    "- Prefers short answers in the morning",
    "- Has a cat called Turing",
    "- Runs on Saturdays",
]
DECISIONS = ["- 2026-11-02: the Apollo bridge uses steel, not timber"]
PROJECTS = ["- Apollo: a footbridge over the river, due in March", "- Learning Portuguese"]


def memory_text(facts: list[str], decisions: list[str], projects: list[str]) -> str:
    sections = [
        "# Memory\n\nDurable facts, decisions and project context.\n",
        "## Facts\n" + "".join(f"{line}\n" for line in facts),
        "## Decisions\n" + "".join(f"{line}\n" for line in decisions),
        "## Projects\n" + "".join(f"{line}\n" for line in projects),
    ]
    return "\n".join(sections)


def weeks_of_dreams(home: Home) -> None:
    """Dream runs over the last three weeks that grew memory/MEMORY.md, one taking a fact back
    (USER.md and SOUL.md are left as onboarding wrote them)."""
    git = GitStore(home.memory_git, home.workspace, lock=home.lock("memory"))
    git.ensure()
    steps = [
        (20, FACTS[:1], [], PROJECTS[:1]),
        (17, FACTS[:2], [], PROJECTS[:1]),
        (13, FACTS[:3], DECISIONS, PROJECTS[:1]),
        (9, FACTS[:3], DECISIONS, PROJECTS),
        (6, [FACTS[0], FACTS[2]], DECISIONS, PROJECTS),  # the morning habit no longer held
        (3, [FACTS[0], FACTS[2], FACTS[3]], DECISIONS, PROJECTS),
    ]
    for _, facts, decisions, projects in steps:
        text = memory_text(facts, decisions, projects).encode()
        git.write_files({"memory/MEMORY.md": text})
        git.commit_files(git.read_workspace(), "dream")
    now = int(time.time())
    days_ago = [21] + [days for days, *_ in steps]  # the first version, then each run
    _back_date(git, [now - days * DAY_S for days in days_ago])


def _back_date(git: GitStore, times: list[int]) -> None:
    """Write the history again, oldest first, each commit with its time from `times`."""
    with Repo(str(git.git_dir)) as repo:
        branch = b"refs/heads/main"
        chain = [entry.commit for entry in repo.get_walker([repo.refs[branch]])][::-1]
        assert len(chain) == len(times), (len(chain), len(times))
        parent = None
        for old, when in zip(chain, times, strict=True):
            new = Commit()
            new.tree = old.tree
            new.parents = [parent] if parent else []
            new.author = new.committer = old.author
            new.author_time = new.commit_time = when
            new.author_timezone = new.commit_timezone = old.commit_timezone
            new.encoding = old.encoding
            new.message = old.message
            repo.object_store.add_object(new)
            parent = new.id
        repo.refs[branch] = parent
