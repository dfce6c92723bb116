"""The composition root: builds every collaborator once and passes them in."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from loguru import logger

from nanomem.agent import (
    AgentLoop,
    Command,
    ContextBuilder,
    Core,
    InboundMessage,
    MessageBus,
    Skills,
    SqliteInbox,
    Templates,
    retry_delay,
)
from nanomem.config import LLMSettings, ScheduleSettings, Settings, WebSettings
from nanomem.features.consolidation import build as consolidation
from nanomem.features.dream import build as dream
from nanomem.features.mcp import build as mcp
from nanomem.features.recall import build as recall
from nanomem.features.schedules import build as schedules
from nanomem.features.shell_approval import build as shell
from nanomem.features.tasks import build as tasks
from nanomem.features.usage import build as usage
from nanomem.features.voice import build as voice
from nanomem.features.web import build as web
from nanomem.home import Home
from nanomem.memory import (
    TRACKED,
    BpeTokenizer,
    Budget,
    Calibration,
    GitStore,
    HistoryStore,
    SessionStore,
    Version,
)
from nanomem.providers import (
    AfterCall,
    LiteLLMProvider,
    MeteredProvider,
    Provider,
    RetryingProvider,
    import_litellm,
    route,
    supports_images,
)
from nanomem.text.masking import configured_secrets, register_secrets
from nanomem.tools import FileTools, ToolRegistry

# Files and folders the agent may read but never write: nanomem maintains them itself, and
# templates are the agent's own instructions (the person overrides them by hand).
PROTECTED_FILES = ("memory/history.jsonl", "memory/.cursor", "memory/.dream_cursor", "templates")
# The features, in the order their tools are listed to the model and their hooks run.
FEATURES = (
    shell,
    recall,
    schedules,
    consolidation,
    dream,
    web,
    tasks,
    mcp,
    voice,
    usage,
)


@dataclass
class App(Core):
    """The core with its features (`app.feature(Dreaming)`), and what closes it."""

    transports: list[Provider] = field(default_factory=list)  # the model clients

    async def aclose(self) -> None:
        """Close the model clients' connections (in the loop that used them) and the inbox."""
        for transport in self.transports:
            close = getattr(transport, "close", None)
            if close is not None:
                await close()
        if self.bus.inbox is not None:
            self.bus.inbox.close()

    def warm_up(self) -> None:
        """Load the slow libraries in the background (never on the event loop)."""

        litellm = any(isinstance(t, LiteLLMProvider) for t in self.transports)

        def load() -> None:
            self.budget.tokenizer.count("warm up")
            if litellm:  # ~170 MB and 2 s: only for a model that goes through it
                import_litellm()

        threading.Thread(target=load, name="warm-up", daemon=True).start()


def workspace_of(settings: Settings, home: Home) -> Path:
    configured = settings.agent.workspace
    return configured.expanduser().resolve() if configured else home.workspace


def build_app(
    settings: Settings,
    home: Home,
    provider: Provider | None = None,
    bus: MessageBus | None = None,
    *,
    durable: bool = False,
    config: Path | None = None,
) -> App:
    """With `durable`, messages pass through the inbox on disk (the gateway); `config`: the
    config file in use when it is not the home's (hidden from shell commands like the home)."""
    llm = settings.llm
    register_secrets(configured_secrets(settings))
    workspace = workspace_of(settings, home)
    templates = Templates(workspace / "templates")
    skills = Skills(workspace / "skills")
    tool_settings = settings.tools
    tools = ToolRegistry(max_output_chars=tool_settings.max_output_chars, workspace=workspace)
    file_tools = FileTools(
        workspace,
        restrict=tool_settings.restrict_to_workspace,
        read_only=PROTECTED_FILES,
        memory_files=TRACKED,
        memory_lock=home.lock("memory"),
        documents=tool_settings.documents,
    )
    for tool in [*file_tools.tools(), *skills.tools()]:
        tools.add(tool)
    if bus is None:
        bus = MessageBus(inbox=SqliteInbox(home.inbox) if durable else None)
    agent = settings.agent
    bus.retry_plan = functools.partial(
        retry_delay, max_attempts=agent.max_attempts, first_s=agent.retry_first_s
    )
    history = HistoryStore(workspace / "memory", home.lock("history"), within=workspace)
    transports: list[Provider] = []
    after_call: list[AfterCall] = []  # the features' hooks, added below
    model = functools.partial(_model, transports=transports, after_call=after_call)
    provider = model(llm) if provider is None else MeteredProvider(provider, llm.model, after_call)
    budget = Budget(BpeTokenizer(), Calibration(), llm, settings.memory)
    sessions = SessionStore(home.sessions, counter=budget.count, lock_dir=home.locks / "sessions")
    budget.on_exact.append(sessions.recount)
    context = ContextBuilder(
        workspace,
        templates,
        skills,
        tools.names,
        history,
        budget.history_chars,
        vision=_vision_check(settings),
        groups_see_personal=settings.memory.groups_see_personal,
        documents=tool_settings.documents,
    )
    loop = AgentLoop(
        bus=bus,
        sessions=sessions,
        context=context,
        provider=provider,
        tools=tools,
        templates=templates,
        budget=budget,
        settings=settings,
        log_file=home.logs / "nanomem.log",
    )
    git = GitStore(home.memory_git, workspace, lock=home.lock("memory"))
    git.after_restore.append(functools.partial(_undo_import, home, workspace, settings.schedule))
    app = App(
        settings,
        home,
        workspace,
        bus,
        provider,
        sessions,
        templates,
        tools,
        context,
        loop,
        history,
        budget,
        git,
        config,
        model,
        after_call=after_call,
        transports=transports,
    )
    for build in FEATURES:
        app.add(build(app))
    for name, (what, setting, owner_only) in SWITCHED_OFF.items():
        answer = OFF.format(what=what, name=name, setting=setting)
        loop.commands.fallback(_saying(name, answer, owner_only))
    return app


def _undo_import(
    home: Home, workspace: Path, limits: ScheduleSettings, undone: Version
) -> list[str]:
    """What a restore of an import also takes back; imported only when a version is restored."""
    from nanomem.importers.undo import undo_import

    return undo_import(home, workspace, limits, undone)


def _saying(name: str, answer: str, owner_only: bool) -> Command:
    async def say(msg: InboundMessage, args: str) -> str:
        return answer

    return Command(name, answer, say, immediate=True, listed=False, owner_only=owner_only)


# The commands of a feature that is off: what is off, and the one line that turns it on.
SWITCHED_OFF = {
    "allowed": ("The shell is off", "tools.shell_enabled true", True),
    "disallow": ("The shell is off", "tools.shell_enabled true", True),
    "mcp": ("No MCP server is configured", "mcp.servers.NAME.command PROGRAM", False),
}
OFF = (
    "{what}, so /{name} has nothing to do. To turn it on: `nanomem config set {setting}`, "
    "then restart the gateway (or the chat)."
)


def _model(
    llm: LLMSettings, *, transports: list[Provider], after_call: list[AfterCall]
) -> Provider:
    """The model client the route asks for (providers/routing.py), with retries around it,
    each answered call told to `after_call` (the usage feature's record)."""
    path = route(llm)
    logger.debug("model {} via {}", llm.model, path.describe())  # `nanomem status` says it too
    client: Provider
    if path.path == "direct":
        from nanomem.providers import OpenAIHTTPProvider  # its HTTP client: only when chosen

        client = OpenAIHTTPProvider(llm, path)
    else:
        client = LiteLLMProvider(llm)
    transports.append(client)
    return MeteredProvider(RetryingProvider(client, llm.max_retries), llm.model, after_call)


def _vision_check(settings: Settings) -> Callable[[], bool]:
    return functools.partial(supports_images, settings.llm)


class FetchFailed(Exception):
    """A URL a person handed a channel that could not, or may not, be fetched; says why."""


async def fetch_guarded(web: WebSettings, url: str, max_bytes: int) -> tuple[str, bytes]:
    """GET a URL a client gave a channel (an image URL in an agent API request): (the media
    type, the bytes), through the web tools' address guard (tools.web.allow_private and
    allow_networks; every redirect checked again) whether or not the web tools are on. The
    seam by which a channel, which may not import a feature, fetches as they do."""
    from nanomem.features.web import NOT_WEB, AddressGuard, WebClient, WebError

    guard = AddressGuard(allow_private=web.allow_private, allow_networks=web.allow_networks)
    client = WebClient(
        guard, max_bytes=max_bytes, max_redirects=web.max_redirects, timeout_s=web.timeout_s
    )
    try:
        page = await client.request("GET", url)
    except WebError as exc:
        # The web tools' words may name the URL or a redirect's target, for the model that
        # wrote it; a client's URL may carry a key in its query, so the client gets neither.
        reason = str(exc).replace(url, "…")
        if reason.startswith(NOT_WEB):
            reason = f"{NOT_WEB}; it led to another kind of address"
        raise FetchFailed(reason) from None
    except ValueError:  # yarl or idna: no address one could reach (a bad port, IPv6 or name)
        raise FetchFailed("not a usable URL") from None
    if page.status >= 400:
        raise FetchFailed(f"the server answered HTTP {page.status}")
    if page.cut:
        raise FetchFailed(f"larger than {max_bytes} bytes")
    return page.content_type, page.body
