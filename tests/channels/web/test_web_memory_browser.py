"""The Memory, Timeline and Dream review pages in a real browser, against the real gateway:
an edit becomes a version on the timeline and is restored; a Dream change (made by a real
`nanomem dream` with dream.review = "ask") is approved or rejected; a line's why; a conflicting
edit refused; a phone's width; the keyboard alone; hostile text everywhere stays text."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from nanomem.home import Home
from nanomem.memory import GitStore, HistoryStore, NewEntry
from tests.conftest import cli_env, run_cli
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.browser import PHONE, base_url, log_in, screenshot, web_gateway
from tests.helpers.gateway import GatewayProcess, onboarded
from tests.helpers.memory_history import weeks_of_dreams
from tests.helpers.xss import CORPUS, Watch, watch

pytestmark = pytest.mark.slow
REVIEW = {"NANOMEM_DREAM__REVIEW": "ask"}
HOSTILE = "<img src=x onerror=alert(1)> {{7*7}}"  # short enough for a summary
BEFORE_DREAM = "Nothing is known yet."


class Site:
    def __init__(self, home: Home, llm: FakeOpenAI, gateway: GatewayProcess) -> None:
        self.home, self.llm, self.gateway = home, llm, gateway
        self.base = base_url(gateway)

    def user_md(self) -> str:
        return (self.home.workspace / "USER.md").read_text()

    def git(self) -> GitStore:
        return GitStore(self.home.memory_git, self.home.workspace, lock=self.home.lock("memory"))

    def told(self, session: str, content: str) -> None:
        """A conversation archived to history: what Dream learns from."""
        history = HistoryStore(
            self.home.workspace / "memory", self.home.lock("history"), within=self.home.workspace
        )
        history.append_sync([NewEntry(session, content, "summary")])

    def dream(self, old: str, new: str) -> None:
        """A real `nanomem dream` (its own process, the scripted model) that prepares an edit
        of USER.md for review."""
        self.llm.reply(f"NEW: USER.md: {new}")
        self.llm.tool_call("edit_memory", {"file": "USER.md", "old_text": old, "new_text": new})
        self.llm.reply("Prepared.")
        dreamed = run_cli("dream", env=cli_env(self.home, self.llm, **REVIEW))
        assert dreamed.returncode == 0, dreamed.stderr
        assert "waits for your decision" in dreamed.stdout


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    home = onboarded(tmp_path_factory, "web-memory")
    weeks_of_dreams(home)
    with FakeOpenAI() as llm, web_gateway(home, llm, **REVIEW) as gateway:
        yield Site(home, llm, gateway)


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    context = browser.new_context()
    yield context
    context.close()


def logged_in(context: BrowserContext, site: Site) -> tuple[Page, Watch]:
    page = context.new_page()
    seen = watch(context, page)
    log_in(page, site.base)
    return page, seen


def clean(seen: Watch) -> None:
    seen.assert_clean()


def edit_user_md(page: Page, text: str, summary: str) -> None:
    section = page.locator("#user")
    section.get_by_role("button", name="Edit USER.md").click()
    section.get_by_label("USER.md", exact=True).fill(text)
    section.get_by_label("What did you change?").fill(summary)
    section.get_by_role("button", name="Save").click()


def test_an_edit_is_a_version_on_the_timeline_and_is_restored(
    context: BrowserContext, site: Site
) -> None:
    page, seen = logged_in(context, site)
    page.goto(f"{site.base}/memory")
    before = site.user_md()
    edit_user_md(page, "# User\n\n- Name: Ada\n- Builds the Apollo bridge\n", "Ada's name and work")
    saved = page.locator("#user").get_by_role("status")
    expect(saved).to_contain_text("Saved as version")
    expect(saved).to_contain_text("edit: Ada's name and work")
    expect(
        page.locator("#user .memory-line").filter(has_text="Builds the Apollo bridge")
    ).to_have_count(1)
    assert "- Name: Ada" in site.user_md()

    page.get_by_role("link", name="Timeline", exact=True).click()
    newest = page.locator("article.version").first
    expect(newest.locator(".kind")).to_have_text("edit")
    expect(newest.get_by_role("heading", level=3)).to_have_text("edit: Ada's name and work")
    expect(newest.locator("pre.diff-lines .add").filter(has_text="- Name: Ada")).to_have_count(1)
    expect(newest.locator("pre.diff-lines .del").filter(has_text=BEFORE_DREAM)).to_have_count(1)

    newest.get_by_role("link", name="Restore…").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Restore version")
    expect(page.locator("main")).to_contain_text("No later change touched these files.")
    page.get_by_role("button", name="Restore: undo").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Restored")
    expect(page.get_by_role("status")).to_contain_text("Restored USER.md to before")
    assert site.user_md() == before
    page.get_by_role("link", name="Back to the timeline").click()
    expect(page.locator("article.version").first.locator(".kind")).to_have_text("restore")
    clean(seen)


def test_a_dream_change_is_approved_and_its_line_says_why(
    context: BrowserContext, site: Site
) -> None:
    site.told("telegram:42", f"- 2026-11-22: the user is Ada; she drinks green tea {HOSTILE}")
    site.dream(BEFORE_DREAM, "- Drinks green tea")
    page, seen = logged_in(context, site)
    page.get_by_role("link", name="Dream review", exact=True).click()
    pending = page.locator("section.pending")
    expect(pending.get_by_role("heading", level=2)).to_contain_text("USER.md +1 -1")
    expect(pending.locator(".add").filter(has_text="- Drinks green tea")).to_have_count(1)
    screenshot(page, "review")
    pending.get_by_role("button", name="Approve").click()
    expect(page.get_by_role("status")).to_contain_text("saved as version")
    expect(page.locator(".empty")).to_contain_text("No memory change is waiting")
    assert "- Drinks green tea" in site.user_md()

    page.get_by_role("link", name="Memory", exact=True).click()
    line = page.locator("#user .memory-line").filter(has_text="Drinks green tea")
    line.get_by_role("button", name="Why").click()
    answer = line.locator(".why-box")
    expect(answer).to_contain_text("by Dream run")
    chat = answer.get_by_role("link", name="telegram chat 42")
    expect(chat).to_have_attribute("href", "/chat/c/telegram%3A42")
    expect(answer.locator("q")).to_contain_text(f"she drinks green tea {HOSTILE}")
    expect(answer.locator("img")).to_have_count(0)
    clean(seen)


def test_a_dream_change_is_rejected_with_a_reason(context: BrowserContext, site: Site) -> None:
    site.told("telegram:42", "- 2026-11-23: the user said she dislikes coffee")
    site.dream("- Drinks green tea", f"- Drinks green tea\n- Dislikes coffee {HOSTILE}")
    before = site.user_md()
    page, seen = logged_in(context, site)
    page.goto(f"{site.base}/review")
    expect(page.locator("section.pending .add")).to_contain_text(f"Dislikes coffee {HOSTILE}")
    page.get_by_label("Why reject it?").fill(f"only a joke {HOSTILE}")
    page.get_by_role("button", name="Reject").click()
    expect(page.get_by_role("status")).to_contain_text(f"Noted why: only a joke {HOSTILE}")
    expect(page.locator(".decisions li").first).to_contain_text("rejected")
    assert site.user_md() == before
    clean(seen)


def test_a_decision_made_elsewhere_is_shown_not_made_twice(
    context: BrowserContext, site: Site
) -> None:
    site.told("telegram:42", "- 2026-11-24: the user lives in Quito")
    site.dream("- Drinks green tea", "- Drinks green tea\n- Lives in Quito")
    page, seen = logged_in(context, site)
    page.goto(f"{site.base}/review")
    elsewhere = run_cli("chat", "-m", "/dream-approve", env=cli_env(site.home, site.llm))
    assert elsewhere.returncode == 0 and "Approved" in elsewhere.stdout, elsewhere.stderr
    versions = len(site.git().log(limit=100))
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_role("alert")).to_contain_text("was already approved")
    expect(page.get_by_role("alert")).to_contain_text("nothing was decided twice")
    assert len(site.git().log(limit=100)) == versions
    assert site.user_md().count("- Lives in Quito") == 1
    clean(seen)


def test_a_conflicting_edit_is_refused_and_the_text_kept(
    context: BrowserContext, site: Site
) -> None:
    page, seen = logged_in(context, site)
    page.goto(f"{site.base}/memory")
    section = page.locator("#user")
    section.get_by_role("button", name="Edit USER.md").click()
    typed = site.user_md() + "- Typed in the first tab\n"
    section.get_by_label("USER.md", exact=True).fill(typed)
    section.get_by_label("What did you change?").fill("first tab")

    other = context.new_page()
    other.goto(f"{site.base}/memory")
    edit_user_md(other, site.user_md() + "- From the other tab\n", "other tab")
    expect(other.locator("#user").get_by_role("status")).to_contain_text("Saved as version")

    section.get_by_role("button", name="Save").click()
    refused = section.get_by_role("alert").filter(has_text="changed since you began")
    expect(refused).to_contain_text("edit: other tab")
    expect(section.get_by_label("USER.md", exact=True)).to_have_value(typed)  # nothing lost
    assert "- From the other tab" in site.user_md()
    assert "Typed in the first tab" not in site.user_md()
    clean(seen)


def test_a_huge_edit_is_refused_beside_the_text_kept(context: BrowserContext, site: Site) -> None:
    page, seen = logged_in(context, site)
    page.goto(f"{site.base}/memory")
    before = site.user_md()
    section = page.locator("#user")
    section.get_by_role("button", name="Edit USER.md").click()
    huge = "- a fact\n" * 150_000  # 1.35 MB: more than one request may carry
    # Set, not typed: typing a megabyte into a spell-checked textarea takes minutes.
    section.get_by_label("USER.md", exact=True).evaluate("(box, text) => box.value = text", huge)
    section.get_by_label("What did you change?").fill("everything")
    section.get_by_role("button", name="Save").click()
    expect(section.locator(".edit-error")).to_have_text(
        "That text is larger than the web app takes in one request; nothing was saved."
    )
    assert section.get_by_label("USER.md", exact=True).input_value() == huge
    assert site.user_md() == before
    clean(seen)


def test_at_a_phone_width_by_keyboard_alone(browser: Browser, site: Site) -> None:
    context = browser.new_context(viewport=PHONE)
    page, seen = logged_in(context, site)
    page.goto(f"{site.base}/memory")
    edit = page.locator("#user").get_by_role("button", name="Edit USER.md")
    for _ in range(200):  # Tab from the top until the Edit button has the focus
        page.keyboard.press("Tab")
        if edit.evaluate("button => document.activeElement === button"):
            break
    else:
        raise AssertionError("Edit USER.md cannot be reached with Tab")
    page.keyboard.press("Enter")
    text = page.locator("#user").get_by_label("USER.md", exact=True)
    expect(text).to_be_focused()  # the form takes the focus as it appears
    page.keyboard.press("Control+End")
    page.keyboard.type("- Typed on a phone\n")
    page.keyboard.press("Tab")
    page.keyboard.type("from the phone")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    expect(page.locator("#user").get_by_role("status")).to_contain_text("edit: from the phone")
    expect(edit).to_be_focused()  # the focus comes back where it left
    assert "- Typed on a phone" in site.user_md()
    for path in ("/memory", "/timeline", "/review"):
        page.goto(f"{site.base}{path}")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], f"{path} is {width} px wide"
        screenshot(page, f"{path[1:]}-phone")
    clean(seen)
    context.close()


def test_the_pages_at_their_best(context: BrowserContext, site: Site) -> None:
    """By now: facts, several versions, a coloured diff, the chart."""
    page, seen = logged_in(context, site)
    page.set_viewport_size({"width": 1100, "height": 900})
    page.goto(f"{site.base}/memory")
    line = page.locator("#user .memory-line").filter(has_text="Lives in Quito")
    line.get_by_role("button", name="Why").click()
    expect(line.locator(".why-box q")).to_contain_text("the user lives in Quito")
    screenshot(page, "memory")
    page.goto(f"{site.base}/timeline")
    expect(page.locator("figure.chart")).to_have_count(2)
    assert page.locator("figure.chart").first.locator("rect.plus").count() >= 21  # day by day
    assert page.locator("figure.chart").last.locator("rect.minus").count() > 0
    assert page.locator("article.version").count() >= 6
    screenshot(page, "timeline")
    clean(seen)


def test_hostile_words_in_lines_a_summary_and_a_diff_stay_words(
    context: BrowserContext, site: Site
) -> None:
    """Last: the corpus in the memory files, an edit's summary and the timeline's diff (a Dream
    diff, a why's quote and a reason carried some of it above), then restored away."""
    page, seen = logged_in(context, site)
    page.goto(f"{site.base}/memory")
    before = site.user_md()
    lines = "".join(f"- {hostile}\n" for hostile in CORPUS)
    edit_user_md(page, before + lines, f"hostile words {HOSTILE}")
    expect(page.locator("#user").get_by_role("status")).to_contain_text(
        f"edit: hostile words {HOSTILE}"
    )
    expect(page.locator("#user")).to_contain_text("{{7*7}}")  # shown as typed, never 49
    expect(page.locator("#user")).to_contain_text("<script>alert(1)</script>")
    page.goto(f"{site.base}/timeline")
    newest = page.locator("article.version").first
    expect(newest.get_by_role("heading", level=3)).to_have_text(f"edit: hostile words {HOSTILE}")
    expect(newest.locator("pre.diff-lines .add")).to_have_count(len(CORPUS))
    expect(newest.locator("pre.diff-lines")).to_contain_text('"><script>alert(1)</script>')
    newest.get_by_role("link", name="Restore…").click()
    page.get_by_role("button", name="Restore: undo").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Restored")
    assert site.user_md() == before
    clean(seen)
