import json
import random
from pathlib import Path

from nanomem.memory.session import Counter, SessionStore, session_filename, to_wire


def user(text: str) -> dict[str, object]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, object]:
    return {"role": "assistant", "content": text}


def tool_call(call_id: str) -> dict[str, object]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }


def tool_result(call_id: str) -> dict[str, object]:
    return {"role": "tool", "tool_call_id": call_id, "name": "f", "content": "ok"}


async def test_append_and_reload(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session = await store.get("telegram:42")
    await store.append(session, [user("hi"), assistant("hello")])
    reloaded = await SessionStore(tmp_path).get("telegram:42")
    assert [m["content"] for m in reloaded.messages] == ["hi", "hello"]
    assert all("ts" in m for m in reloaded.messages)
    header = json.loads(session.path.read_text().splitlines()[0])
    assert (
        header["_type"] == "session" and header["version"] == 2 and header["key"] == "telegram:42"
    )


async def test_a_session_records_whether_it_is_a_room_once_and_a_room_stays_one(
    tmp_path: Path,
) -> None:
    store = SessionStore(tmp_path)
    room = await store.get("matrix:!team:x")
    await store.mark_room(room, True)
    await store.append(room, [user("hi")])
    assert json.loads(room.path.read_text().splitlines()[0])["room"] is True  # in the header
    await store.mark_room(room, False)  # a later message saying otherwise changes nothing
    reloaded = await SessionStore(tmp_path).get("matrix:!team:x")
    assert reloaded.room is True and reloaded.is_room
    private = await store.get("line:-7")  # a private chat, whatever its id looks like
    await store.mark_room(private, False)
    await store.append(private, [user("hi")])
    assert not (await SessionStore(tmp_path).get("line:-7")).is_room
    await store.mark_room(private, True)  # the channel now says room: a room from here on
    assert (await SessionStore(tmp_path).get("line:-7")).is_room


async def test_append_writes_only_new_lines(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session = await store.get("k")
    await store.append(session, [user("one")])
    first = session.path.read_bytes()
    await store.append(session, [assistant("two")])
    assert session.path.read_bytes().startswith(first)


async def test_torn_last_line_is_dropped_and_appending_still_works(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session = await store.get("k")
    await store.append(session, [user("kept")])
    with session.path.open("a") as fh:
        fh.write('{"role": "assistant", "content": "torn')  # a crash mid-write
    fresh = SessionStore(tmp_path)
    reloaded = await fresh.get("k")
    assert [m["content"] for m in reloaded.messages] == ["kept"]
    await fresh.append(reloaded, [assistant("after")])
    again = await SessionStore(tmp_path).get("k")
    assert [m["content"] for m in again.messages] == ["kept", "after"]


async def test_corrupt_middle_line_is_skipped(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session = await store.get("k")
    await store.append(session, [user("a")])
    with session.path.open("a") as fh:
        fh.write("not json\n")
    await store.append(session, [assistant("b")])
    reloaded = await SessionStore(tmp_path).get("k")
    assert [m["content"] for m in reloaded.messages] == ["a", "b"]


def test_filenames_are_collision_free_and_traversal_proof() -> None:
    keys = ["cli:direct", "cli/direct", "cli_direct", "../../etc/passwd", "a:b:c", "", "x" * 500]
    names = [session_filename(k) for k in keys]
    assert len(set(names)) == len(keys)
    for name in names:
        assert "/" not in name and "\\" not in name and not name.startswith(".")
        assert name.endswith(".jsonl") and len(name) < 100


async def test_state_records_survive_reload(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session = await store.get("k")
    await store.append(session, [user("old"), assistant("old reply")])
    await store.update_state(session, replay_from=2)
    reloaded = await SessionStore(tmp_path).get("k")
    assert reloaded.replay_from == 2
    assert reloaded.history(10_000) == ([], 0)


async def test_history_window_starts_at_a_user_turn(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session = await store.get("k")
    turns = []
    for i in range(50):
        turns += [user(f"question {i} " + "x" * 90), assistant(f"answer {i} " + "y" * 90)]
    await store.append(session, turns)
    window, tokens = session.history(budget_tokens=400)
    assert 0 < tokens <= 400
    assert window and window[0]["role"] == "user"
    assert window[-1]["content"].startswith("answer 49")
    assert len(window) < 20
    assert all(set(m) <= {"role", "content", "tool_calls", "tool_call_id", "name"} for m in window)


def test_to_wire_drops_orphan_tool_calls() -> None:
    messages = [user("go"), tool_call("c1"), tool_result("c1"), tool_call("c2"), user("next")]
    wire = to_wire(messages)
    assert [m["role"] for m in wire] == ["user", "assistant", "tool", "user"]
    assert wire[1]["tool_calls"][0]["id"] == "c1"


async def test_cache_is_bounded(tmp_path: Path) -> None:
    store = SessionStore(tmp_path, cache_size=3)
    sessions = [await store.get(f"k{i}") for i in range(10)]
    for session in sessions:
        await store.append(session, [user("hi")])
    assert all([await store.get(f"k{i}") is sessions[i] for i in (7, 8, 9)])  # the last 3 kept
    assert await store.get("k6") is not sessions[6]  # and no more: k6 was dropped, read again
    assert store.count() == 10
    reloaded = await store.get("k0")
    assert reloaded is not sessions[0] and [m["content"] for m in reloaded.messages] == ["hi"]


async def test_a_session_file_appears_with_its_first_message(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session = await store.get("only:looked-at")
    assert store.count() == 0
    await store.append(session, [user("now")])
    lines = session.path.read_text().splitlines()
    assert json.loads(lines[0])["_type"] == "session" and len(lines) == 2


async def test_unconsolidated_tokens_follow_appends_and_the_boundary(tmp_path: Path) -> None:
    store = SessionStore(tmp_path, counter=lambda m: len(str(m.get("content"))))
    session = await store.get("k")
    await store.append(session, [user("aaaa"), assistant("bb")])
    assert session.unconsolidated_tokens() == 6
    await store.append(session, [user("ccc")])
    assert session.unconsolidated_tokens() == 9
    await store.update_state(session, replay_from=2)
    assert session.unconsolidated_tokens() == 3
    await store.update_state(session, replay_from=0)
    assert session.unconsolidated_tokens() == 9


def reference_history(
    messages: list[dict[str, object]], replay_from: int, budget: int, end: int, count: Counter
) -> tuple[list[dict[str, object]], int]:
    """The window the plain way: walk back from `end` while it fits, then on to a user turn."""
    start, used = end, 0
    while start > replay_from and used + count(messages[start - 1]) <= budget:
        used += count(messages[start - 1])
        start -= 1
    while start < end and messages[start]["role"] != "user":
        used -= count(messages[start])
        start += 1
    # Orphans are judged turn by turn: a tool result can only follow its call in one turn.
    turns: list[list[dict[str, object]]] = []
    for message in messages[start:end]:
        if message["role"] == "user" or not turns:
            turns.append([])
        turns[-1].append(message)
    return [wire for turn in turns for wire in to_wire(turn)], used


def random_turn(rng: random.Random, n: int) -> list[dict[str, object]]:
    turn = [user(f"q{n} " + "x" * rng.randint(0, 300))]
    for step in range(rng.choice([0, 0, 1, 2])):
        call_id = f"c{n}-{step}"
        turn.append(tool_call(call_id))
        if rng.random() > 0.15:  # sometimes a crash left the call without its result
            turn.append(tool_result(call_id))
    if rng.random() > 0.1:
        turn.append(assistant(f"a{n} " + "y" * rng.randint(0, 300)))
    return turn


async def test_history_window_matches_the_plain_walk(tmp_path: Path) -> None:
    def count(message: dict[str, object]) -> int:
        return 4 + len(str(message.get("content") or "")) // 3

    rng = random.Random(5)
    store = SessionStore(tmp_path, counter=count)
    session = await store.get("k")
    turn_starts: list[int] = []
    for n in range(300):
        turn_starts.append(len(session.messages))
        await store.append(session, random_turn(rng, n))
        if rng.random() < 0.05:  # consolidation or /new moved the start forward
            await store.update_state(session, replay_from=rng.choice(turn_starts))
        for _ in range(3):
            budget = rng.choice([0, 50, 400, 3000, 10**6])
            end = rng.choice([len(session.messages), turn_starts[-1], rng.choice(turn_starts)])
            expected = reference_history(session.messages, session.replay_from, budget, end, count)
            assert session.history(budget, end=end) == expected, (n, budget, end)


async def test_each_message_is_counted_once_and_archived_ones_never(tmp_path: Path) -> None:
    counted: list[str] = []

    def count(message: dict[str, object]) -> int:
        counted.append(str(message["content"]))
        return 10

    store = SessionStore(tmp_path)
    session = await store.get("k")
    await store.append(
        session, [user(f"m{i}") if i % 2 == 0 else assistant(f"m{i}") for i in range(1000)]
    )
    await store.update_state(session, replay_from=990)
    reloaded = await SessionStore(tmp_path, counter=count).get("k")
    for _ in range(5):
        reloaded.history(budget_tokens=10**6)
        reloaded.unconsolidated_tokens()
    assert counted == [f"m{i}" for i in range(990, 1000)]


async def test_a_turn_torn_by_a_crash_loses_its_unanswered_call_only(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session = await store.get("k")
    await store.append(
        session, [user("first"), tool_call("c1"), tool_result("c1"), assistant("ok")]
    )
    await store.append(session, [user("second"), tool_call("c2")])  # the result never made it
    reloaded = await SessionStore(tmp_path).get("k")
    await store.append(reloaded, [user("third")])
    window, _ = reloaded.history(10**6, end=len(reloaded.messages) - 1)
    assert [m["role"] for m in window] == ["user", "assistant", "tool", "assistant", "user"]
    assert all(m.get("tool_calls", [{"id": "c1"}])[0]["id"] == "c1" for m in window)


async def test_a_replay_start_past_the_end_means_nothing_to_replay(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session = await store.get("k")
    await store.append(session, [user("one"), assistant("two")])
    await store.update_state(session, replay_from=4)  # lines lost to corruption since
    reloaded = await SessionStore(tmp_path).get("k")
    assert reloaded.history(10**6) == ([], 0)
    assert reloaded.unconsolidated_tokens() == 0
    await store.append(reloaded, [user("three"), assistant("four"), user("five")])
    assert [m["content"] for m in reloaded.history(10**6)[0]] == ["five"]  # from index 4 on


async def test_write_locks_are_not_kept_for_sessions_no_longer_written(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    for n in range(100):
        session = await store.get(f"telegram:{n}")
        await store.append(session, [user("hi")])
    assert len(store._write_locks) == 0  # each lock lived only while it was held
