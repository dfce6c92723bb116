"""What waits for a chat nobody has open (agent/unread.py): kept in order, shown once, read
within bounds whatever the file holds."""

from nanomem.agent import Unread
from nanomem.agent.unread import MAX_BYTES
from nanomem.home import Home


def test_what_waits_is_taken_once_in_order(home: Home) -> None:
    unread = Unread.of(home)
    assert not unread.waiting("cli:direct") and unread.take("cli:direct") == []
    unread.leave("cli:direct", "first\nwith a second line")
    unread.leave("cli:direct", "second")
    unread.leave("cli:other", "not for this chat")
    assert unread.waiting("cli:direct")
    assert unread.take("cli:direct") == ["first\nwith a second line", "second"]
    assert not unread.waiting("cli:direct") and unread.take("cli:direct") == []
    assert unread.take("cli:other") == ["not for this chat"]


def test_a_torn_or_foreign_line_is_skipped_and_a_huge_file_read_from_its_end(home: Home) -> None:
    unread = Unread.of(home)
    unread.leave("cli:direct", "kept")
    with unread.path("cli:direct").open("a") as fh:
        fh.write('["not", "a record"]\n{"text": 7}\n{"v": 1, "text": "torn')
    assert unread.take("cli:direct") == ["kept"]
    filler = "x" * 1000
    for _ in range(MAX_BYTES // 1000 + 50):
        unread.leave("cli:direct", filler)
    unread.leave("cli:direct", "the newest")
    taken = unread.take("cli:direct")
    assert taken[-1] == "the newest" and set(taken[:-1]) == {filler}
    assert sum(len(t) for t in taken) < MAX_BYTES  # only what the bound lets in
