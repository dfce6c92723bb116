"""The Chat page in a real browser against the real gateway and the scripted model: a new
conversation, a reply streaming into two tabs, /stop, commands, an approval button, files in
(an image, a PDF, a voice note) and out (a download), history paging, another channel's
conversation read-only, a phone's width, the keyboard alone, and hostile text everywhere."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from nanomem.home import Home
from nanomem.memory.session import SessionStore
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.fakes.web_server import tiny_pdf
from tests.helpers.browser import PHONE, base_url, log_in, screenshot, web_gateway
from tests.helpers.gateway import GatewayProcess, onboarded
from tests.helpers.ogg import NOTE
from tests.helpers.xss import CORPUS, CORPUS_TEXT, watch

pytestmark = pytest.mark.slow
WAIT_MS = 20_000
expect.set_options(timeout=WAIT_MS)
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360f8cf000000030101005c6b6a0f0000000049454e44ae426082"
)
SHOWN = """Here is the plan, in **three** steps:

1. Water the plants
2. Call Ada

```python
def greet(name: str) -> str:
    return f"hello {name}"
```
"""
HEARD = "remind me to water the plants"


def scripted(request: dict[str, Any]) -> Step:
    """The model, by what the person wrote last (each test its own words)."""
    last = request["messages"][-1]
    if last.get("role") == "tool":
        return Step.reply(f"result: {last['content']}")
    content = last.get("content") or ""
    if isinstance(content, list):  # with images: the words are its text parts
        content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    text = str(content)
    if "SLOWLY" in text:
        return Step.reply("one two three four five six seven eight", pieces=8, pause=0.8)
    if "HOLD" in text:
        # Long enough to show while held: the core holds back a secret's length of the end.
        return Step.reply("this is what I said so far, " * 8, pieces=2, hold_after=2)
    if "RUN " in text:
        return Step.tool_call("exec", {"command": text.split("RUN ", 1)[1].strip()})
    if "SEND IT" in text:
        return Step.tool_call("send_file", {"path": "report.txt", "caption": "Your report"})
    if "REPLY HOSTILE" in text:  # every line of it, streamed piece by piece
        return Step.reply(CORPUS_TEXT, pieces=12, pause=0.05)
    if "HOSTILE" in text:
        return Step.tool_call("read_file", {"path": CORPUS_TEXT[:2000]})
    if "SHOW OFF" in text:
        return Step.reply(SHOWN, pieces=6, pause=0.05)
    words = [line for line in text.split("\n")[1:] if line and not line.startswith("[")]
    return Step.reply(f"heard: {words[0][:200] if words else ''}")


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        fake.set_fallback(scripted)
        yield fake


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, llm: FakeOpenAI) -> Iterator[GatewayProcess]:
    home: Home = onboarded(tmp_path_factory, "web-chat")
    env = {"NANOMEM_TOOLS__SHELL_ENABLED": "true", "NANOMEM_LLM__SUPPORTS_IMAGES": "true"}
    with web_gateway(home, llm, **env) as running:
        yield running


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    made = browser.new_context()
    made.set_default_timeout(WAIT_MS)
    yield made
    made.close()


def new_conversation(page: Page, base: str) -> str:
    log_in(page, base)
    page.get_by_role("button", name="New conversation").click()
    page.wait_for_url(re.compile(r".*/chat/c/web(%3A|:).+"))
    return page.url


def say(page: Page, text: str) -> None:
    page.get_by_label("Message").fill(text)
    page.get_by_role("button", name="Send").click()


def write_session(home: Home, key: str, messages: list[dict[str, Any]], room: bool) -> None:
    async def write() -> None:
        store = SessionStore(home.sessions)
        session = await store.get(key)
        await store.mark_room(session, room)
        await store.append(session, messages)

    with concurrent.futures.ThreadPoolExecutor(1) as thread:  # Playwright's loop runs here
        thread.submit(asyncio.run, write()).result()


def test_a_reply_streams_into_two_tabs_of_a_new_conversation(
    context: BrowserContext, gateway: GatewayProcess
) -> None:
    base = base_url(gateway)
    page = context.new_page()
    url = new_conversation(page, base)
    other = context.new_page()
    other.goto(url)
    say(page, "tell me SLOWLY")
    for tab in (page, other):  # partial text, while the model still writes
        growing = tab.locator(".msg.live .text")
        expect(growing).to_contain_text("one")
        assert "eight" not in growing.inner_text()
        expect(tab.locator("#stop")).to_be_visible()
    for tab in (page, other):
        final = tab.locator(".msg.reply:not(.live)").last
        expect(final).to_contain_text("one two three four five six seven eight")
        expect(tab.locator(".msg.person").last).to_contain_text("tell me SLOWLY")
        expect(tab.locator(".msg.live")).to_have_count(0)
        expect(tab.locator("#stop")).to_be_hidden()
    other.reload()  # from the session: each message once
    expect(other.locator(".msg.person")).to_have_count(1)
    expect(other.locator(".msg.reply")).to_have_count(1)
    page.goto(f"{base}/chat")
    expect(page.get_by_role("link", name="tell me SLOWLY")).to_be_visible()


def test_stop_cuts_a_running_turn_short(
    context: BrowserContext, gateway: GatewayProcess, llm: FakeOpenAI
) -> None:
    page = context.new_page()
    new_conversation(page, base_url(gateway))
    say(page, "HOLD on")
    expect(page.locator(".msg.live .text")).to_contain_text("this is")
    page.get_by_role("button", name="Stop").click()
    expect(page.locator(".msg.note").last).to_contain_text("Stopped.")
    expect(page.locator("#stop")).to_be_hidden()
    expect(page.locator(".msg.reply")).to_contain_text("this is")  # what it said is kept
    llm.release()


def test_slash_commands_are_listed_and_answered(
    context: BrowserContext, gateway: GatewayProcess
) -> None:
    page = context.new_page()
    new_conversation(page, base_url(gateway))
    page.get_by_label("Message").fill("/")
    commands = page.locator("#commands")
    expect(commands).to_be_visible()
    expect(commands.get_by_role("button", name="/help")).to_be_visible()
    page.get_by_label("Message").fill("/he")
    commands.get_by_role("button", name="/help").click()
    expect(page.get_by_label("Message")).to_have_value("/help ")
    page.get_by_label("Message").press("Enter")
    expect(page.locator(".msg.note").last).to_contain_text("/stop")


def test_a_shell_command_is_approved_with_a_button(
    context: BrowserContext, gateway: GatewayProcess
) -> None:
    page = context.new_page()
    new_conversation(page, base_url(gateway))
    say(page, "RUN echo approved")
    question = page.locator(".msg.note", has_text="Run this command?")
    expect(question).to_contain_text("echo approved")
    question.get_by_role("button", name="Allow once").click()
    expect(page.locator(".msg.reply").last).to_contain_text("approved")
    expect(page.locator(".msg.reply").last).to_contain_text("result: exit code 0")


def test_an_image_a_pdf_and_a_voice_note_reach_the_model(
    context: BrowserContext, gateway: GatewayProcess, llm: FakeOpenAI
) -> None:
    page = context.new_page()
    url = new_conversation(page, base_url(gateway))
    pdf = tiny_pdf(["Quarterly revenue rose 12 percent"])
    page.locator("#file").set_input_files(
        [
            {"name": "dot.png", "mimeType": "image/png", "buffer": PNG},
            {"name": "report.pdf", "mimeType": "application/pdf", "buffer": pdf},
        ]
    )
    expect(page.locator("#attached")).to_contain_text("dot.png, report.pdf")
    say(page, "look at these")
    expect(page.locator(".msg.reply").last).to_contain_text("heard: look at these")
    request = next(r for r in reversed(llm.requests) if "look at these" in json.dumps(r))
    sent = json.dumps(request)
    assert "image_url" in sent and "data:image/png;base64," in sent
    assert "Quarterly revenue rose 12 percent" in sent
    person = page.locator(".msg.person").last
    expect(person).to_contain_text("[photo: dot.png]")
    expect(person).to_contain_text("[document: report.pdf]")

    llm.transcript(HEARD)  # a recording, posted as the page's recorder posts it
    csrf = page.locator("#conversation").get_attribute("data-csrf") or ""
    voice = {"name": "voice-note", "mimeType": "audio/ogg", "buffer": NOTE}
    posted = page.request.post(
        f"{url}/send", multipart={"voice": voice}, headers={"X-CSRF-Token": csrf}
    )
    assert posted.status == 204
    expect(page.locator(".msg.person").last).to_contain_text(f"[voice note, 0:02] {HEARD}")
    (sent_audio,) = llm.audio_requests
    assert sent_audio.data == NOTE
    words = json.dumps(llm.requests[-1]["messages"][-1])
    assert HEARD in words and "Transcribed from speech" in words  # the person's own voice


def test_a_sent_file_is_a_download_of_that_conversation_only(
    context: BrowserContext, gateway: GatewayProcess
) -> None:
    (gateway.home.workspace / "report.txt").write_text("<html><script>alert(1)</script>")
    page = context.new_page()
    new_conversation(page, base_url(gateway))
    say(page, "SEND IT please")
    link = page.get_by_role("link", name="Download report.txt")
    expect(link).to_be_visible()
    expect(page.locator(".msg.note.file")).to_contain_text("Your report")
    with page.expect_download() as download:
        link.click()
    saved = download.value.path()
    assert saved.read_text() == "<html><script>alert(1)</script>"
    href = base_url(gateway) + (link.get_attribute("href") or "")
    response = page.request.get(href)
    assert response.headers["content-disposition"].startswith("attachment;")
    assert response.headers["content-type"] == "application/octet-stream"
    other = page.context.new_page()
    other_url = new_conversation(other, base_url(gateway))
    stolen = href.split("/files/", 1)[1]
    assert page.request.get(f"{other_url}/files/{stolen}").status == 404


def test_a_long_history_is_paged_in(context: BrowserContext, gateway: GatewayProcess) -> None:
    home = gateway.home
    said = []
    for n in range(5000):
        said += [{"role": "user", "content": f"question {n}"}]
        said += [{"role": "assistant", "content": f"answer {n}"}]
    write_session(home, "web:longhistory01", said, room=False)
    page = context.new_page()
    log_in(page, base_url(gateway))
    page.goto(f"{base_url(gateway)}/chat/c/web%3Alonghistory01")
    expect(page.locator("#m9999")).to_contain_text("answer 4999")
    assert page.locator(".msg").count() <= 40
    page.get_by_role("button", name="Earlier messages").first.click()
    expect(page.locator("#m9959")).to_be_attached()
    assert page.locator(".msg").count() <= 120  # a page or two more, never the whole session


def test_another_channels_conversation_is_read_only(
    context: BrowserContext, gateway: GatewayProcess
) -> None:
    said = [
        {"role": "user", "content": "[runtime · now · channel telegram]\n\nwhat is on today"},
        {"role": "assistant", "content": "Nothing **planned**."},
    ]
    write_session(gateway.home, "telegram:-100777", said, room=True)
    page = context.new_page()
    log_in(page, base_url(gateway))
    page.get_by_role("link", name="what is on today").click()
    expect(page.get_by_role("note")).to_contain_text("read-only")
    expect(page.get_by_role("note")).to_contain_text("group")
    expect(page.locator(".msg.reply strong")).to_have_text("planned")
    expect(page.get_by_label("Message")).to_have_count(0)


def test_at_a_phones_width_by_keyboard_alone(browser: Browser, gateway: GatewayProcess) -> None:
    context = browser.new_context(viewport=PHONE)
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    new_conversation(page, base_url(gateway))
    box = page.get_by_label("Message")
    for _ in range(30):  # Tab to the box, as a person without a mouse does
        if box.evaluate("el => el === document.activeElement"):
            break
        page.keyboard.press("Tab")
    page.keyboard.type("typed by keyboard")
    page.keyboard.press("Enter")
    expect(page.locator(".msg.reply").last).to_contain_text("heard: typed by keyboard")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"]
    expect(page.get_by_role("button", name="Send")).to_be_visible()
    screenshot(page, "chat-phone")
    context.close()


def test_hostile_text_stays_text_everywhere(
    context: BrowserContext, gateway: GatewayProcess, llm: FakeOpenAI
) -> None:
    page = context.new_page()
    watched = watch(context, page)
    url = new_conversation(page, base_url(gateway))
    say(page, CORPUS_TEXT)  # the person's own words, and the model's reply quoting them
    expect(page.locator(".msg.reply").last).to_contain_text("heard:")
    say(page, "REPLY HOSTILE")  # the model's reply, growing and then rendered
    expect(page.locator(".msg.reply").last).to_contain_text("{{7*7}}")
    expect(page.locator(".msg.reply").last).to_contain_text("<img src=x onerror=alert(1)>")
    say(page, "HOSTILE tool step")  # a tool step and its result
    expect(page.locator(".msg.reply").last).to_contain_text("result:")
    page.locator("#file").set_input_files(  # a file's name
        [{"name": CORPUS[1] + ".png", "mimeType": "image/png", "buffer": PNG}]
    )
    say(page, "a hostile name")
    expect(page.locator(".msg.reply").last).to_contain_text("heard: a hostile name")
    page.goto(url)  # and all of it again, from the session
    expect(page.locator(".msg.person").first).to_contain_text("{{7*7}}")
    expect(page.locator(".msg.person", has_text="a hostile name")).to_contain_text("onerror")
    watched.assert_clean()


def test_the_chat_at_its_best(context: BrowserContext, gateway: GatewayProcess) -> None:
    page = context.new_page()
    page.set_viewport_size({"width": 1100, "height": 900})
    new_conversation(page, base_url(gateway))
    say(page, "RUN echo hello from the shell")
    page.locator(".msg.note").get_by_role("button", name="Allow once").click()
    expect(page.locator(".msg.reply").last).to_contain_text("result: exit code 0")
    page.reload()  # the conversation as the session keeps it: no note shown again
    expect(page.locator(".msg.reply").last).to_contain_text("result: exit code 0")
    expect(page.locator(".msg.note")).to_have_count(0)
    say(page, "SHOW OFF what you can do")
    expect(page.locator(".msg.reply .md pre")).to_be_visible()
    screenshot(page, "chat")
