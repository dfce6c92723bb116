"""Matrix end-to-end encryption: the real `nanomem gateway` with matrix.e2e on, against a real
Synapse, and people whose matrix-nio client encrypts (a device and a crypto store each): what
they write is decrypted, answered like any message, and answered encrypted."""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli_env, run_cli_here
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.helpers import wait_until
from tests.helpers.gateway import onboarded
from tests.helpers.matrix import EncryptedPerson, bodies, shown
from tests.helpers.matrix_cast import Cast, echo, gateway, said
from tests.helpers.synapse import Synapse, synapse

pytestmark = pytest.mark.slow
__all__ = ["synapse"]  # the session's homeserver, a fixture

MEMBER = "m.room.member"
_tags = iter(range(1, 10_000))
E2E = {"NANOMEM_MATRIX__E2E": "true"}


@pytest.fixture
def cast(synapse: Synapse) -> Cast:
    return Cast(synapse, f"e{next(_tags)}")


@pytest.fixture
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        server.set_fallback(echo)
        yield server


@pytest.fixture
def owner(cast: Cast, tmp_path: Path) -> Iterator[EncryptedPerson]:
    person = EncryptedPerson(cast.server, cast.owner.user, tmp_path / "owner-store")
    yield person
    person.close()


def joined(person: EncryptedPerson, room: str, user_id: str) -> None:
    wait_until(lambda: user_id in person.joined(room), timeout=30, what=f"{user_id} to join")


def whole_replies(person: EncryptedPerson, room: str, bot: str, count: int) -> list[str]:
    """The bot's messages as the person's client decrypts them, once `count` are whole."""
    return wait_until(
        lambda: (
            (found := bodies(person.events(room), bot))
            and len(found) >= count
            and not any(b.endswith("…") for b in found)
            and found
        ),
        timeout=60,
        what=f"{count} whole replies the person's client decrypts",
    )


def sent_by(cast: Cast, room: str) -> list[dict[str, Any]]:
    """The bot's messages as the homeserver keeps them (read by a client without keys):
    everything but its membership."""
    events = cast.owner.events(room)
    return [e for e in events if e.get("sender") == cast.bot.user_id and e["type"] != MEMBER]


def test_an_encrypted_dm_is_answered_encrypted(
    tmp_path_factory: pytest.TempPathFactory, cast: Cast, llm: FakeOpenAI, owner: EncryptedPerson
) -> None:
    """The owner's encrypted message reaches the model as they wrote it; the reply, grown by
    edits, reaches the homeserver only encrypted (each edit's m.replace beside the ciphertext,
    its new text inside), and the owner's client decrypts it whole; the crypto store is
    private to the home's owner."""
    home = onboarded(tmp_path_factory, "e2e-dm")

    def slow(request: dict[str, Any]) -> Step:
        return Step.reply(f"echo: {said(request)} " + "more " * 20, pieces=10, pause=0.3)

    llm.set_fallback(slow)
    with gateway(home, cast, llm, **E2E) as process:
        room = owner.room(cast.bot.user_id, direct=True)
        joined(owner, room, cast.bot.user_id)
        owner.say(room, "a secret question")
        found = whole_replies(owner, room, cast.bot.user_id, 1)
        _, health = process.health()
    assert found == ["echo: a secret question " + ("more " * 20).strip()]
    assert said(llm.requests[0]) == "a secret question"
    events = sent_by(cast, room)
    assert events and all(e["type"] == "m.room.encrypted" for e in events)
    assert "secret question" not in json.dumps(events)
    edits = [e for e in events if e["content"].get("m.relates_to", {}).get("rel_type")]
    assert edits, "the reply grew by encrypted edits"
    assert "e2e" not in json.dumps(health)  # nothing to report: it works
    store = home.root / "matrix" / "store"
    assert store.stat().st_mode & 0o777 == 0o700
    assert len(list(store.glob("*.db"))) == 1


def test_an_encrypted_group_room_is_answered_when_mentioned(
    tmp_path_factory: pytest.TempPathFactory, cast: Cast, llm: FakeOpenAI, owner: EncryptedPerson
) -> None:
    """In an encrypted room of three, a message that does not name the bot is not answered;
    one that mentions it is, encrypted for the room."""
    home = onboarded(tmp_path_factory, "e2e-group")
    with gateway(home, cast, llm, **E2E):
        room = owner.room(cast.bot.user_id, cast.friend.user.user_id)
        cast.friend.join(room)
        joined(owner, room, cast.bot.user_id)
        owner.say(room, "just among us")
        owner.say(room, f"{cast.bot.user_id}: what is two and two")
        found = whole_replies(owner, room, cast.bot.user_id, 1)
    assert found == ["echo: what is two and two"]
    assert len(llm.requests) == 1  # the unaddressed message never reached the model
    assert all(e["type"] == "m.room.encrypted" for e in sent_by(cast, room))


def test_a_restart_keeps_the_device_and_its_keys(
    tmp_path_factory: pytest.TempPathFactory, cast: Cast, llm: FakeOpenAI, owner: EncryptedPerson
) -> None:
    """The bot logs in with its password: the first start makes its device and its keys, a
    restart logs in as the same device (no new one) and decrypts what is written after it
    with the keys it kept."""
    home = onboarded(tmp_path_factory, "e2e-restart")
    login = {
        **E2E,
        "NANOMEM_MATRIX__ACCESS_TOKEN": "",
        "NANOMEM_MATRIX__PASSWORD": cast.bot.password,
    }
    path = "/_matrix/client/v3/devices"
    with gateway(home, cast, llm, **login):
        room = owner.room(cast.bot.user_id, direct=True)
        joined(owner, room, cast.bot.user_id)
        owner.say(room, "before")
        whole_replies(owner, room, cast.bot.user_id, 1)
    devices = cast.server.call("GET", path, token=cast.bot.token)["devices"]
    with gateway(home, cast, llm, **login):
        owner.say(room, "after")
        found = whole_replies(owner, room, cast.bot.user_id, 2)
    again = cast.server.call("GET", path, token=cast.bot.token)["devices"]
    assert found == ["echo: before", "echo: after"]
    assert sorted(d["device_id"] for d in again) == sorted(d["device_id"] for d in devices)
    assert len(list((home.root / "matrix" / "store").glob("*.db"))) == 1


def test_files_go_both_ways_encrypted(
    tmp_path_factory: pytest.TempPathFactory, cast: Cast, llm: FakeOpenAI, owner: EncryptedPerson
) -> None:
    """An encrypted file sent to the bot reaches the turn decrypted (saved in the workspace);
    a file the agent sends goes encrypted (`file`, no `url`), and the owner's client decrypts
    it to what the workspace holds."""
    home = onboarded(tmp_path_factory, "e2e-files")
    (home.workspace / "report.csv").write_text("a,b\n1,2\n")
    llm.add(Step.tool_call("send_file", {"path": "report.csv", "caption": "the report"}))
    llm.add(Step.reply("sent the report"))
    with gateway(home, cast, llm, **E2E, NANOMEM_MATRIX__STREAM="false"):
        room = owner.room(cast.bot.user_id, direct=True)
        joined(owner, room, cast.bot.user_id)
        owner.send_file(room, "notes.txt", b"remember the milk")
        found = whole_replies(owner, room, cast.bot.user_id, 2)
        sent = [c for c in shown(owner.events(room), cast.bot.user_id) if "file" in c]
    turn = said(llm.requests[0])  # the file decrypted, read into the turn as a document
    assert "notes.txt" in turn and "remember the milk" in turn
    saved = [p for p in (home.workspace / "media").rglob("*") if p.is_file()]
    assert [p.read_bytes() for p in saved] == [b"remember the milk"]
    assert found[-1] == "sent the report"
    (file,) = sent
    assert "url" not in file and file["body"] == "the report"
    assert owner.file_of(file) == b"a,b\n1,2\n"
    assert "remember the milk" not in json.dumps(sent_by(cast, room))


def test_a_kill_mid_reply_loses_nothing_and_doubles_nothing_encrypted(
    tmp_path_factory: pytest.TempPathFactory, cast: Cast, llm: FakeOpenAI, owner: EncryptedPerson
) -> None:
    """The gateway is SIGKILLed while an encrypted reply grows: after the restart (the same
    device, its keys kept) each message has exactly one reply, whole, as the owner's client
    decrypts it (the message it grew in is finished by an edit, read back by decrypting it)."""
    home = onboarded(tmp_path_factory, "e2e-kill")

    def slow(request: dict[str, Any]) -> Step:
        return Step.reply(f"answer to {said(request)}: " + "words " * 30, pieces=15, pause=0.2)

    llm.set_fallback(slow)
    first = gateway(home, cast, llm, **E2E)
    room = owner.room(cast.bot.user_id, direct=True)
    joined(owner, room, cast.bot.user_id)
    for n in range(2):
        owner.say(room, f"question {n}")
    wait_until(
        lambda: bodies(owner.events(room), cast.bot.user_id), timeout=60, what="a reply growing"
    )
    first.stop(signal.SIGKILL)
    with gateway(home, cast, llm, **E2E):
        found = whole_replies(owner, room, cast.bot.user_id, 2)
    expected = [f"answer to question {n}: " + ("words " * 30).strip() for n in range(2)]
    assert [x.strip() for x in found] == expected


def test_a_message_that_cannot_be_decrypted_gets_one_note(
    tmp_path_factory: pytest.TempPathFactory, cast: Cast, llm: FakeOpenAI, owner: EncryptedPerson
) -> None:
    """Encrypted messages whose room key never reaches the bot (sent from a device that
    shares none): the room is told once, encrypted, that they could not be decrypted, the
    model is never asked, and the room's next readable message is answered."""
    home = onboarded(tmp_path_factory, "e2e-undecryptable")
    secret = {"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "AwgA", "session_id": "x",
              "sender_key": "k", "device_id": "D"}  # fmt: skip
    with gateway(home, cast, llm, **E2E) as process:
        room = owner.room(cast.bot.user_id, direct=True)
        joined(owner, room, cast.bot.user_id)
        for _ in range(2):  # from the owner's other device, which has no keys
            cast.owner.say(room, "", kind="m.room.encrypted", **secret)
        whole_replies(owner, room, cast.bot.user_id, 1)
        cast.owner.say(room, "", kind="m.room.encrypted", **secret)
        owner.say(room, "!help")
        found = whole_replies(owner, room, cast.bot.user_id, 2)
        process.wait_for_line(r"matrix: a message in .* cannot be decrypted here")
    assert len(found) == 2 and "could not decrypt" in found[0]
    assert not llm.requests


def test_without_e2e_an_encrypted_room_gets_one_plain_note(
    tmp_path_factory: pytest.TempPathFactory, cast: Cast, llm: FakeOpenAI, owner: EncryptedPerson
) -> None:
    """matrix.e2e off (as it is without the extra): the owner's encrypted messages get one
    plain note, the model is never asked, and a plain room still works."""
    home = onboarded(tmp_path_factory, "e2e-off")
    with gateway(home, cast, llm):
        room = owner.room(cast.bot.user_id, direct=True)
        joined(owner, room, cast.bot.user_id)
        owner.say(room, "one")
        owner.say(room, "two")
        notes = wait_until(
            lambda: bodies(cast.owner.events(room), cast.bot.user_id),
            timeout=60,
            what="the note",
        )
        plain = cast.owner.room(cast.bot.user_id, direct=True)
        wait_until(lambda: cast.bot.user_id in cast.owner.joined(plain), timeout=30, what="join")
        cast.owner.say(plain, "in the clear")
        wait_until(
            lambda: bodies(cast.owner.events(plain), cast.bot.user_id), timeout=60, what="reply"
        )
        notes = bodies(cast.owner.events(room), cast.bot.user_id)
    assert len(notes) == 1 and "encrypted" in notes[0]
    assert [said(r) for r in llm.requests] == ["in the clear"]


def test_status_and_doctor_say_encryption_is_on(
    tmp_path_factory: pytest.TempPathFactory, cast: Cast, llm: FakeOpenAI
) -> None:
    """With the extra installed (this venv), `status` and `doctor` say encryption is on and
    that devices are not verified; without matrix.e2e they say nothing of it."""
    home = onboarded(tmp_path_factory, "e2e-status")
    on, off = cli_env(home, llm, **cast.env(**E2E)), cli_env(home, llm, **cast.env())
    status, doctor = run_cli_here("status", env=on), run_cli_here("doctor", env=on)
    plain = run_cli_here("status", env=off)
    assert "end-to-end encryption on (devices trusted on first use" in status.stdout
    assert "end-to-end encryption on" in doctor.stdout
    assert "encryption" not in plain.stdout


def test_a_room_that_turns_encryption_on_is_answered_encrypted(
    tmp_path_factory: pytest.TempPathFactory, cast: Cast, llm: FakeOpenAI, owner: EncryptedPerson
) -> None:
    """A DM without encryption is answered in the clear; once the owner turns encryption on
    while the gateway runs, the next reply is encrypted, never in the clear."""
    home = onboarded(tmp_path_factory, "e2e-turned-on")
    with gateway(home, cast, llm, **E2E, NANOMEM_MATRIX__STREAM="false"):
        room = owner.room(cast.bot.user_id, direct=True, encrypted=False)
        joined(owner, room, cast.bot.user_id)
        owner.say(room, "before")
        whole_replies(owner, room, cast.bot.user_id, 1)
        owner.encrypt(room)
        owner.say(room, "after")
        found = whole_replies(owner, room, cast.bot.user_id, 2)
    assert found == ["echo: before", "echo: after"]
    kinds = [e["type"] for e in sent_by(cast, room)]
    assert kinds == ["m.room.message", "m.room.encrypted"]
    assert "echo: after" not in json.dumps(sent_by(cast, room))


def test_a_lost_crypto_store_is_said_with_its_fix(
    tmp_path_factory: pytest.TempPathFactory, cast: Cast, llm: FakeOpenAI
) -> None:
    """The store deleted between two runs, the access token (so the device) the same: the
    homeserver refuses the new keys for the old device; the gateway says so on /health with
    the fix, and plain rooms are still answered."""
    home = onboarded(tmp_path_factory, "e2e-lost")
    with gateway(home, cast, llm, **E2E):
        pass
    shutil.rmtree(home.root / "matrix" / "store")
    with gateway(home, cast, llm, **E2E) as process:
        _, health = process.health()
        room = cast.owner.room(cast.bot.user_id, direct=True)
        wait_until(lambda: cast.bot.user_id in cast.owner.joined(room), timeout=30, what="join")
        cast.owner.say(room, "in the clear")
        wait_until(lambda: bodies(cast.owner.events(room), cast.bot.user_id), timeout=60,
                   what="the reply")  # fmt: skip
    assert "refused device" in json.dumps(health) and "a new device" in json.dumps(health)
