from nanomem.features.consolidation.consolidator import Archived
from nanomem.text.plural import plural


def test_the_noun_agrees_with_the_count() -> None:
    assert plural(1, "message") == "1 message"
    assert [plural(n, "entry", "entries") for n in (0, 1, 2)] == [
        "0 entries",
        "1 entry",
        "2 entries",
    ]


def test_one_archived_message_is_a_message() -> None:
    assert Archived(1, []).describe() == "Archived 1 message; nothing in it needed keeping."
