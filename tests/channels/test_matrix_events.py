"""What the Matrix channel reads from a room event and writes into one: mentions, commands
typed with `!`, HTML from the model's text, parts within the event limit, transaction ids."""

from __future__ import annotations

import json

import pytest

from channels.matrix.client import decrypted_file
from channels.matrix.events import (
    BANG,
    EVENT_LIMIT,
    GROWN_LIMIT,
    content,
    edit,
    growing,
    inviter,
    measure,
    names_us,
    said,
    split,
    txn_id,
    without_mention,
)

BOT = "@nanomem:example.org"


def message(body: str, **extra: object) -> dict[str, object]:
    return {
        "type": "m.room.message",
        "event_id": "$1",
        "sender": "@ann:example.org",
        "content": {"msgtype": "m.text", "body": body, **extra},
    }


def test_a_mention_is_the_bots_id_or_name_in_the_body_or_in_m_mentions() -> None:
    assert names_us(said(message(f"{BOT}: hi")), BOT, "Nanomem")  # type: ignore[arg-type]
    assert names_us(said(message("nanomem, hi")), BOT, "Nanomem")  # type: ignore[arg-type]
    tagged = said(message("hi", **{"m.mentions": {"user_ids": [BOT]}}))
    assert tagged is not None and names_us(tagged, BOT, "")
    assert not names_us(said(message("nanomemories are nice")), BOT, "Nanomem")  # type: ignore[arg-type]
    assert without_mention(f"{BOT}: what now", BOT, "Nanomem") == "what now"
    assert without_mention("Nanomem, what now", BOT, "Nanomem") == "what now"


def test_a_reply_names_the_event_it_answers_and_an_edit_is_not_a_new_message() -> None:
    reply = said(message("yes", **{"m.relates_to": {"m.in_reply_to": {"event_id": "$0"}}}))
    assert reply is not None and reply.reply_to == "$0"
    assert said(message("* fixed", **{"m.relates_to": {"rel_type": "m.replace"}})) is None
    assert said({**message("x"), "type": "m.reaction"}) is None


def test_commands_are_typed_with_a_bang_and_written_with_one() -> None:
    ours = {"help", "dream-log"}
    assert BANG.inbound("!help", ours) == "/help"
    assert BANG.inbound("!dream-log 3", ours) == "/dream-log 3"
    assert BANG.inbound("!nothing", ours) == "!nothing"
    written = BANG.outbound("Send /help or /dream-log; see https://x.org/help", ours)
    assert written == "Send !help or !dream-log; see https://x.org/help"


def test_the_html_escapes_the_models_text_and_keeps_code_blocks() -> None:
    sent = content('**bold** <a href="x">y</a> & more\n\n```\nif a < b:\n```')
    html = sent["formatted_body"]
    assert "<strong>bold</strong>" in html and "&lt;a href=" in html and "<a " not in html
    assert "<pre><code>if a &lt; b:" in html
    assert "**" not in sent["body"] and "if a < b:" in sent["body"]
    assert content("@room look")["m.mentions"] == {}  # pings nobody
    note = content("<b>a</b>\n*b*", markdown=False)
    assert note["body"] == "<b>a</b>\n*b*"
    assert note["formatted_body"] == "&lt;b&gt;a&lt;/b&gt;<br/>*b*"
    changed = edit("$9", content("new"))
    assert changed["m.new_content"]["body"] == "new" and changed["body"] == "* new"
    assert changed["m.relates_to"] == {"rel_type": "m.replace", "event_id": "$9"}


def test_a_long_reply_is_split_into_parts_within_the_event_limit() -> None:
    text = "\n\n".join(f"{n} " + "é < & > " * 3000 for n in range(8))  # escaping grows it
    parts = split(text)
    assert len(parts) > 1
    assert all(measure(part) <= EVENT_LIMIT for part in parts)
    compact = (",", ":")  # as the homeserver stores it
    sizes = [
        len(json.dumps(content(p), ensure_ascii=False, separators=compact).encode()) for p in parts
    ]
    assert all(size <= EVENT_LIMIT for size in sizes)
    fenced = "```\n" + "\n".join(f"line {n} <x>" for n in range(9000)) + "\n```"
    assert all(p.startswith("```\n") and p.endswith("\n```") for p in split(fenced))

    def words(t: str) -> str:  # cut between words, the space at a cut goes
        return "".join(t.split())

    assert words("".join(parts)) == words(text)
    assert split("short") == ["short"]


def test_a_growing_reply_measures_no_more_of_its_text_however_long_it_grows() -> None:
    """Each edit of a growing reply shows its first part: the text measured for it is bounded
    by the half event that part may fill, not by all the model has written (a reply growing to
    megabytes was re-split whole at every edit)."""
    paragraph = "word " * 40 + "é\n\n"
    measured: list[int] = []

    def counted(text: str) -> int:
        measured.append(len(text))
        return measure(text)

    work = []
    for size in (100_000, 1_000_000, 4_000_000):
        measured.clear()
        text = (paragraph * (size // len(paragraph) + 1))[:size]
        shown = growing(text, counted)
        assert text.startswith(shown) and measure(shown) <= GROWN_LIMIT
        work.append(sum(measured))
    assert work[0] == work[1] == work[2]  # the same work at 100 kB, 1 MB and 4 MB
    assert work[0] < 40 * GROWN_LIMIT


def test_a_part_keeps_its_transaction_id_across_restarts() -> None:
    assert txn_id("a1", 7, 0) == txn_id("a1", 7, 0) != txn_id("a1", 7, 1) != txn_id("a1", 8, 1)
    assert txn_id("a1", 7, 0) != txn_id("b2", 7, 0)  # a new home's message 7 is another one
    assert txn_id("a1", None, 0) is None  # not in the inbox: the client makes one


def test_the_inviter_is_read_from_the_invites_own_member_event() -> None:
    state = [
        {"type": "m.room.member", "state_key": "@eve:x", "sender": "@eve:x"},
        {"type": "m.room.member", "state_key": BOT, "sender": "@ann:example.org"},
    ]
    assert inviter(state, BOT) == "@ann:example.org"
    assert inviter([{"type": "m.room.name"}], BOT) == ""


def test_an_encrypted_attachment_is_read_from_its_file_key() -> None:
    """In an encrypted room a file's address is inside `file`, with the key to it; a `file`
    that is not an object is no attachment address at all."""
    keys = {"url": "mxc://example.org/abc", "key": {"k": "K"}, "iv": "I", "hashes": {}}
    found = said(message("notes.txt", msgtype="m.file", file=keys))
    assert found is not None and found.url == "mxc://example.org/abc" and found.file == keys
    odd = said(message("x", msgtype="m.file", file="mxc://example.org/abc"))
    assert odd is not None and odd.url == "" and odd.file is None


def test_an_encrypted_attachment_is_decrypted_and_an_altered_one_refused() -> None:
    """What nio encrypted for a room is decrypted back; altered on its way (its hash no longer
    fits), or with keys missing, it is a ValueError (the file refused with a note)."""
    from nio.crypto import encrypt_attachment

    data, keys = encrypt_attachment(b"remember the milk")
    assert decrypted_file(data, keys) == b"remember the milk"
    for bad_data, bad_keys in ((data[:-1] + b"?", keys), (data, {"iv": keys["iv"]})):
        with pytest.raises(ValueError, match="cannot be decrypted"):
            decrypted_file(bad_data, bad_keys)
