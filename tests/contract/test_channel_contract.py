"""The channel contract, written once and run for every channel (issue 33): each driver in
tests/helpers/channel_drivers.py starts the real gateway process with its channel against its
loopback platform. One gateway per channel serves the whole module; the kill restarts it."""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import wait_until
from tests.helpers.channel_drivers import (
    APPROVAL_ASKED,
    DRIVERS,
    GROWING,
    PERSONAL,
    Driver,
    contract_model,
    kill_and_restart,
)
from tests.helpers.gateway import onboarded, user_texts
from tests.helpers.line_people import personal

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=sorted(DRIVERS))
def driver(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Driver]:
    home = onboarded(tmp_path_factory, f"contract-{request.param}")
    (home.workspace / "USER.md").write_text(f"# User\n- {PERSONAL}\n")
    with FakeOpenAI() as llm:
        llm.set_fallback(contract_model())
        running = DRIVERS[request.param](home, llm)
        try:
            running.start()
            yield running
            assert running.stop() == 0, running.log()
        finally:
            if running.gateway is not None and running.gateway.proc.poll() is None:
                running.kill()
            running.close()


def asked(llm: FakeOpenAI, words: str) -> list[dict[str, Any]]:
    """The model requests whose last person's message says `words`."""
    return [r for r in llm.requests if user_texts(r) and words in user_texts(r)[-1]]


def echoed(words: str) -> Any:
    return lambda shown: any(f"echo: {words}" in t for t in shown)


def test_a_stranger_is_refused_silently_and_the_model_never_asked(driver: Driver) -> None:
    driver.say("stranger", "let me in")
    driver.say("stranger", "please")
    driver.say("friend", "after the stranger")
    driver.wait_posted("friend", echoed("after the stranger"), "the friend's reply")
    assert driver.posted("stranger") == []
    assert not asked(driver.llm, "let me in") and not asked(driver.llm, "please")
    person = str(driver.PEOPLE["stranger"])
    assert sum("refused" in line and person in line for line in driver.log().splitlines()) == 1


def test_a_chat_s_replies_come_in_the_order_it_was_written(driver: Driver) -> None:
    for n in range(4):
        driver.say("friend", f"in order {n}")
    shown = driver.wait_posted("friend", echoed("in order 3"), "the last reply")
    answered = [t for t in shown if "echo: in order" in t]
    assert answered == [f"echo: in order {n}" for n in range(4)]


def test_a_long_reply_is_split_within_the_platforms_measure(driver: Driver) -> None:
    seen = len(driver.posted("friend"))
    driver.say("friend", "LONG please")

    def split(shown: list[str]) -> bool:  # a message growing meanwhile may be longer at first
        parts = shown[seen:]
        return "Paragraph 059" in "".join(parts) and all(
            driver.measure(p) <= driver.limit for p in parts
        )

    try:
        parts = driver.wait_posted("friend", split, "the last part within the limit")[seen:]
    except AssertionError:
        raise AssertionError([driver.measure(p) for p in driver.posted("friend")[seen:]]) from None
    assert len(parts) >= 2
    numbers = re.findall(r"Paragraph (\d{3})", "\n".join(parts))
    assert numbers == [f"{n:03d}" for n in range(60)]  # nothing lost, doubled or reordered


def test_a_growing_reply_is_edited_at_a_bounded_rate_or_sent_whole(driver: Driver) -> None:
    # In the owner's private chat and in the group at once: each chat's reply is bounded on
    # its own, and the two grow side by side instead of one after the other.
    since = time.monotonic()
    seen = {group: len(driver.posted("owner", group=group)) for group in (False, True)}
    for group in (False, True):
        driver.say("owner", "GROW it", group=group)
    for group in (False, True):
        shown = driver.wait_posted(
            "owner", lambda s, g=group: any(GROWING in t for t in s[seen[g]:]), "the whole reply",
            group=group,
        )  # fmt: skip
        new = shown[seen[group] :]
        assert new == [GROWING], group  # one message grew, or came whole: never two
        times = driver.stream_times("owner", since, group=group)
        if driver.streams:
            assert len(times) >= 2, (group, times)  # it was shown growing
            # The last one makes it the whole reply. Arrival times jitter on a loaded machine:
            # the rate is bounded on average, and no two edits come close together.
            gaps = [b - a for a, b in itertools.pairwise(times)][:-1]
            assert not gaps or sum(gaps) / len(gaps) >= driver.edit_gap_s * 0.95, (group, gaps)
            assert all(gap >= driver.edit_gap_s * 0.6 for gap in gaps), (group, gaps)
        else:
            assert times == []  # no partial text ever shown


def test_a_shell_command_is_approved_by_a_button_or_typed_choice(driver: Driver) -> None:
    driver.say("owner", "RUN echo contract-approved")
    shown = driver.wait_posted(
        "owner", lambda s: any(APPROVAL_ASKED in t for t in s), "the question"
    )
    question = next(t for t in reversed(shown) if APPROVAL_ASKED in t)
    # Without buttons the choices are in the text, to be typed back.
    assert (f"{driver.command_prefix}shell-allow" in question) is not driver.buttons
    driver.approve("owner")
    driver.wait_posted(
        "owner", lambda s: any("result:" in t and "contract-approved" in t for t in s), "the result"
    )


def test_a_group_never_sees_the_owners_personal_memory(driver: Driver) -> None:
    driver.say("owner", "privately, what do you know")
    driver.wait_posted("owner", echoed("privately, what do you know"), "the private reply")
    driver.say("owner", "in the group, what do you know", group=True)
    driver.wait_posted("owner", echoed("in the group, what do you know"), "the group reply",
                       group=True)  # fmt: skip
    (private,) = asked(driver.llm, "privately, what do you know")
    (shared,) = asked(driver.llm, "in the group, what do you know")
    assert personal(private["messages"])
    assert not personal(shared["messages"])  # the channel's word: a group


def test_a_kill_mid_reply_loses_nothing_and_doubles_nothing(driver: Driver) -> None:
    driver.say("friend", "HOLD through the kill")
    wait_until(lambda: asked(driver.llm, "HOLD through the kill"), what="the held turn")
    kill_and_restart(driver, driver.llm.release)  # the killed run's answer goes nowhere
    held = "held answer to HOLD through the kill"
    driver.wait_posted("friend", lambda s: held in s, "the replayed reply")
    driver.say("friend", "after the restart")
    shown = driver.wait_posted("friend", echoed("after the restart"), "the next reply")
    assert shown.count(held) == 1
    assert shown.index(held) < shown.index("echo: after the restart")


@pytest.mark.parametrize("group", [False, True], ids=["private", "group"])
def test_a_kill_while_a_reply_grows_leaves_one_whole_reply(
    driver: Driver, group: bool, request: pytest.FixtureRequest
) -> None:
    if reason := driver.KNOWN_DEFECTS.get(
        f"kill while growing {'in a group' if group else ''}".strip()
    ):
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    since = time.monotonic()
    seen = len(driver.posted("owner", group=group))
    said = f"HOLDGROW through the kill {'here' if group else 'there'}"
    driver.say("owner", said, group=group)
    wait_until(lambda: driver.llm.held, what="the reply to be held halfway")

    def half_shown() -> bool:  # drafted, or posted to grow by edits
        posted = driver.posted("owner", group=group)[seen:]
        return bool(driver.stream_times("owner", since, group=group)) or bool(posted)

    if driver.streams:  # the half-grown reply is on the platform when the kill comes
        wait_until(half_shown, what="half of the reply")
    kill_and_restart(driver, driver.llm.release)
    shown = driver.wait_posted(
        "owner", lambda s: any(GROWING in t for t in s[seen:]), "the reply", group=group
    )
    assert shown[seen:] == [GROWING]  # one message, whole: none left half-grown beside it


def test_a_rate_limited_reply_is_delivered_within_the_run(driver: Driver) -> None:
    driver.rate_limit(2, 1.0)
    started = time.monotonic()
    driver.say("friend", "through the rate limit")
    shown = driver.wait_posted("friend", echoed("through the rate limit"), "the reply")
    assert time.monotonic() - started >= 2.0  # both waits honoured, and in this run
    assert shown.count("echo: through the rate limit") == 1
