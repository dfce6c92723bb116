"""Dream review (dream.review = "ask") with a scripted model: a change waits, approving
commits it as `auto` would, rejecting keeps the files and teaches the next run, expiry drops."""

import json
from datetime import UTC, datetime, timedelta

from channels.telegram.format import message_chunks
from nanomem.agent.bus import InboundMessage
from nanomem.agent.outbound import OutboundMessage
from nanomem.app import App
from nanomem.audience import Sender
from nanomem.features.dream import Dreaming
from nanomem.features.dream.review import PendingChange
from nanomem.home import Home
from nanomem.memory.history import NewEntry
from nanomem.providers.scripted import ScriptedProvider, text
from tests.helpers.dream import LEARN, app_with_history

ASK = {"dream": {"review": "ask"}}


async def say(
    app: App, words: str, chat: str = "direct", channel: str = "cli", owner: bool = True
) -> OutboundMessage:
    sender = Sender(chat, is_owner=owner, shared_room=chat.startswith("-"))  # as Telegram says
    reply = await app.loop.handle(InboundMessage(channel, chat, words, sender))
    assert reply is not None
    return reply


def files(app: App) -> dict[str, bytes | None]:
    return app.git.read_workspace()


async def test_a_change_waits_and_approving_commits_it_as_auto_would(home: Home) -> None:
    app = await app_with_history(home, ScriptedProvider(LEARN), **ASK)
    before, versions = files(app), len(app.git.log())
    proposal = await say(app, "/dream")
    assert proposal.content.startswith("Dream prepared a memory change from 2 history entries")
    assert "+- Name: Ada" in proposal.content and "USER.md +2 -2" in proposal.content
    pending = app.feature(Dreaming).dream.review.peek()
    assert pending is not None
    assert [b.command for b in proposal.buttons] == [
        f"/dream-approve {pending.id}",
        f"/dream-reject {pending.id}",
    ]
    assert files(app) == before and len(app.git.log()) == versions  # nothing live yet
    assert app.history.dream_cursor() == 0

    waiting = await say(app, "/dream")  # one change at a time
    assert "waiting for your decision" in waiting.content
    log = await say(app, "/dream-log")
    assert log.content.startswith(f"Waiting for your decision: `{pending.id}`")

    approved = await say(app, f"/dream-approve {pending.id}")
    assert approved.content.startswith(f"Approved `{pending.id}`: saved as version")
    assert "- Name: Ada" in (app.workspace / "USER.md").read_text()
    assert "Apollo" in (app.workspace / "memory" / "MEMORY.md").read_text()
    latest = app.git.log(limit=1)[0]
    assert latest.summary == "dream: USER.md +2 -2, memory/MEMORY.md +1 -0"
    assert latest.short in approved.content
    assert app.history.dream_cursor() == 2
    assert app.feature(Dreaming).dream.review.peek() is None
    log = await say(app, "/dream-log")
    assert f"- approved `{pending.id}`" in log.content and latest.short in log.content
    again = await say(app, f"/dream-approve {pending.id}")
    assert again.content == "No memory change is waiting for a decision."


async def test_rejecting_keeps_the_files_consumes_the_history_and_teaches_the_next_run(
    home: Home,
) -> None:
    provider = ScriptedProvider(LEARN)
    app = await app_with_history(home, provider, **ASK)
    before = files(app)
    await say(app, "/dream")
    rejected = await say(app, "/dream-reject I never said that")
    assert rejected.content.startswith("Rejected `")
    assert files(app) == before
    assert app.history.dream_cursor() == 2
    log = await say(app, "/dream-log")
    assert "- rejected `" in log.content and "reason: I never said that" in log.content

    await app.history.append([NewEntry("cli:direct", "- 2026-11-23: Ada again", "summary")])
    provider.add(text("NOTHING TO CHANGE"), text("Nothing to do."))
    result = await say(app, "/dream")
    assert result.content == "Read 1 history entry; nothing worth changing in memory."
    analyse = provider.calls[-2][-1]["content"]
    assert "Changes the owner rejected" in analyse
    assert "reason: I never said that" in analyse and "+- Name: Ada" in analyse


async def test_a_group_cannot_decide(home: Home) -> None:
    app = await app_with_history(home, ScriptedProvider(LEARN), **ASK)
    await say(app, "/dream")
    refused = await say(app, "/dream-approve", chat="-100123")
    assert refused.content == "Memory changes are decided by the owner, in a private chat."
    assert app.feature(Dreaming).dream.review.peek() is not None


async def test_only_the_owner_decides(home: Home) -> None:
    # Another allowed person's private chat is not a shared room, but not the owner's either.
    app = await app_with_history(home, ScriptedProvider(LEARN), **ASK)
    await say(app, "/dream")
    pending = app.feature(Dreaming).dream.review.peek()
    assert pending is not None
    for words in (f"/dream-approve {pending.id}", f"/dream-reject {pending.id} no"):
        refused = await say(app, words, chat="43", channel="telegram", owner=False)
        assert refused.content.startswith("Only the owner can use /dream-")
    assert app.feature(Dreaming).dream.review.peek() is not None and app.history.dream_cursor() == 0
    assert app.feature(Dreaming).dream.review.decisions() == []


async def test_a_group_never_sees_the_change_that_waits(home: Home) -> None:
    # The diff is of USER.md and MEMORY.md: the owner's personal memory.
    app = await app_with_history(home, ScriptedProvider(LEARN), **ASK)
    proposal = await say(app, "/dream", chat="-100123", channel="telegram")
    assert "Ada" not in proposal.content and not proposal.buttons
    pending = app.feature(Dreaming).dream.review.peek()
    assert pending is not None and not pending.notified  # the owner is told in their chat
    for words in ("/dream-log", f"/dream-log {pending.id}"):
        shown = await say(app, words, chat="-100123", channel="telegram")
        assert "Ada" not in shown.content and pending.id not in shown.content


async def test_an_old_id_is_refused_and_changes_nothing(home: Home) -> None:
    app = await app_with_history(home, ScriptedProvider(LEARN), **ASK)
    await say(app, "/dream")
    pending = app.feature(Dreaming).dream.review.peek()
    assert pending is not None
    stale = await say(app, "/dream-reject 0badc0de")
    waiting = f"the one waiting is `{pending.id}`"
    assert stale.content == f"Change 0badc0de is no longer waiting; {waiting}."
    assert app.feature(Dreaming).dream.review.peek() is not None and app.history.dream_cursor() == 0


async def test_a_long_change_can_be_read_whole_before_deciding(home: Home) -> None:
    # The notice cuts the diff; what is past the cut must still be readable somewhere.
    app = await app_with_history(home, ScriptedProvider(LEARN), **ASK)
    await say(app, "/dream")
    path = app.feature(Dreaming).dream.review.pending_path
    data = json.loads(path.read_text())
    data["diff"] += "".join(f"+- filler line {n}\n" for n in range(400)) + "+- the hidden end\n"
    path.write_text(json.dumps(data))
    notice = await say(app, "/dream-log")
    assert notice.content.startswith("Waiting for your decision")
    pending = app.feature(Dreaming).dream.review.peek()
    assert pending is not None and "the hidden end" not in pending.describe()
    assert f"/dream-log {pending.id}" in pending.describe()  # says where the rest is
    whole = await say(app, f"/dream-log {pending.id}")
    assert "+- the hidden end" in whole.content


async def test_the_diff_is_shown_as_written_even_with_code_blocks_in_memory(home: Home) -> None:
    # A memory line "```" (a code block in MEMORY.md) closed the notice's fence early: what
    # followed was shown as Markdown, where a link shows only its text.
    app = await app_with_history(home, ScriptedProvider(LEARN), **ASK)
    await say(app, "/dream")
    path = app.feature(Dreaming).dream.review.pending_path
    data = json.loads(path.read_text())
    data["diff"] = "--- a/x\n+++ b/x\n@@ -1,2 +1,3 @@\n ```\n+- [ok](<the real line>)\n ```\n"
    path.write_text(json.dumps(data))
    pending = app.feature(Dreaming).dream.review.peek()
    assert pending is not None
    shown = "".join(part for part, _ in message_chunks(pending.describe(), plain=False))
    assert "+- [ok](&lt;the real line&gt;)" in shown or "+- [ok](<the real line>)" in shown


async def test_an_expired_change_is_dropped_and_dreamed_again(home: Home) -> None:
    provider = ScriptedProvider(LEARN)
    app = await app_with_history(home, provider, **ASK)
    await say(app, "/dream")
    path = app.feature(Dreaming).dream.review.pending_path
    data = json.loads(path.read_text())
    data["created"] = (datetime.now(UTC) - timedelta(hours=73)).isoformat(timespec="seconds")
    path.write_text(json.dumps(data))
    provider.add(*LEARN)
    again = await say(app, "/dream")
    assert again.content.startswith("Dream prepared a memory change from 2 history entries")
    decisions = app.feature(Dreaming).dream.review.decisions()
    assert decisions[0]["status"] == "expired" and decisions[0]["id"] == data["id"]


async def test_a_rejection_a_kill_interrupted_is_finished(home: Home) -> None:
    app = await app_with_history(home, ScriptedProvider(LEARN), **ASK)
    await say(app, "/dream")
    review = app.feature(Dreaming).dream.review
    pending = review.peek()
    assert isinstance(pending, PendingChange)
    review._record(pending, "rejected", reason="no")  # killed right after recording
    assert review.current() is None
    assert app.history.dream_cursor() == 2 and not review.pending_path.exists()


async def test_a_press_while_the_lock_is_held_for_a_moment_waits_instead_of_failing(
    home: Home,
) -> None:
    """The gateway holds the Dream lock briefly to mark a notice sent: a press then must not
    be told Dream is running."""
    import asyncio
    import threading

    app = await app_with_history(home, ScriptedProvider(LEARN), **ASK)
    await say(app, "/dream")
    pending = app.feature(Dreaming).dream.review.peek()
    assert pending is not None
    held, release = threading.Event(), threading.Event()

    def hold_briefly() -> None:
        app.feature(Dreaming).dream.lock.acquire_sync(wait_s=5)
        held.set()
        release.wait(30)
        app.feature(Dreaming).dream.lock.release()

    holder = threading.Thread(target=hold_briefly)
    holder.start()
    assert await asyncio.to_thread(held.wait, 30)
    pressed = asyncio.create_task(say(app, f"/dream-approve {pending.id}"))
    await asyncio.sleep(0.2)  # the press is waiting on the lock now (or soon)
    release.set()
    approved = await pressed
    await asyncio.to_thread(holder.join, 30)
    assert approved.content.startswith(f"Approved `{pending.id}`"), approved.content
