"""Settings: one model for all configuration, loaded from CLI flags, env and config.toml."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from nanomem.channel_settings import DiscordSettings as DiscordSettings
from nanomem.channel_settings import MatrixSettings as MatrixSettings
from nanomem.channel_settings import SlackSettings as SlackSettings
from nanomem.channel_settings import TelegramSettings as TelegramSettings
from nanomem.channel_settings import WebAppSettings as WebAppSettings
from nanomem.config_section import SECTION
from nanomem.config_section import blank_is_unset as blank_is_unset
from nanomem.config_section import http_url as http_url
from nanomem.setting_source import ENV_DELIMITER as ENV_DELIMITER
from nanomem.setting_source import ENV_PREFIX as ENV_PREFIX
from nanomem.setting_source import declared_twice, describe_errors, from_environment, source_in

# The smallest prompt worth sending: a fresh workspace's system prompt and tool schemas
# (about 1,400 tokens) and a short message.
MIN_PROMPT_TOKENS = 2048


class _Section(BaseModel):
    model_config = SECTION


class LLMSettings(_Section):
    model: str = ""
    api_base: str | None = None
    api_key: SecretStr | None = None
    timeout_s: float = Field(120.0, gt=0)
    max_retries: int = Field(3, ge=0, le=10)
    temperature: float | None = Field(None, ge=0, le=2)
    max_tokens: int = Field(4096, gt=0)
    context_window_tokens: int = Field(65536, ge=1024)
    # Whether the model takes images; unset: nanomem/providers/vision.py decides by the model.
    supports_images: bool | None = None
    # "auto": OpenAI-compatible endpoints through the lean client, the rest through litellm
    # (nanomem/providers/routing.py decides); "direct" and "litellm" force one path.
    transport: Literal["auto", "litellm", "direct"] = "auto"
    # Replies arrive piece by piece as the model writes them; off for servers that cannot.
    stream: bool = True
    # The lean client's proxy (http://, https://, socks5://, socks5h://, user:password@ allowed);
    # unset: HTTPS_PROXY and the other usual variables (nanomem/providers/proxies.py).
    proxy: str | None = None

    _blank_is_unset = field_validator("api_base", "proxy", mode="before")(blank_is_unset)

    @field_validator("api_base")
    @classmethod
    def _usable_base(cls, value: str | None) -> str | None:
        return None if value is None else http_url(value, "http://localhost:8000/v1")

    @field_validator("proxy")
    @classmethod
    def _spoken_proxy(cls, value: str | None) -> str | None:
        if value is None:
            return None
        scheme = value.split("://", 1)[0].lower() if "://" in value else "http"
        if scheme not in ("http", "https", "socks5", "socks5h"):  # never echo it: a password
            raise ValueError(
                f"a {scheme}:// proxy is not spoken by the lean client; "
                "use http://, https://, socks5:// or socks5h://"
            )
        return value


class AgentSettings(_Section):
    max_iterations: int = Field(20, ge=1, le=200)
    # Turns mostly wait for the model: a hundred chats at once cost little CPU.
    max_concurrent_turns: int = Field(128, ge=1, le=1024)
    # Background tasks (`spawn`) running at once in a process; 0 switches `spawn` off.
    max_background_tasks: int = Field(4, ge=0, le=64)
    workspace: Path | None = None
    max_message_chars: int = Field(32000, ge=100)
    # A message whose handling fails inside nanomem is tried again after retry_first_s, then
    # six times as long each time (at most an hour); after max_attempts it is parked.
    max_attempts: int = Field(5, ge=1, le=100)
    retry_first_s: float = Field(10.0, gt=0, le=3600)
    # An IANA zone name ("Europe/Berlin") for times given without an offset; unset: the machine's.
    timezone: str | None = None

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{value!r} is not a known time zone (e.g. Europe/Berlin)") from None
        return value


SEARCH_ENDPOINTS = {  # each provider's real endpoint; tools.web.search_base_url replaces it
    "duckduckgo": "https://html.duckduckgo.com/html/",
    "brave": "https://api.search.brave.com",
    "tavily": "https://api.tavily.com",
}


class WebSettings(_Section):
    """web_fetch and web_search (nanomem/features/web/): where they may go and how far."""

    enabled: bool = True
    # Loopback, private, link-local and metadata addresses are refused unless this is true.
    allow_private: bool = False
    # Networks reachable even so (a wiki on the LAN: "192.168.1.0/24"); checked like the rest.
    allow_networks: list[str] = []
    search_provider: Literal["duckduckgo", "brave", "tavily", "searxng"] = "duckduckgo"
    # The chosen provider's endpoint (duckduckgo, brave, tavily); unset: SEARCH_ENDPOINTS.
    search_base_url: str | None = None
    brave_api_key: SecretStr | None = None
    tavily_api_key: SecretStr | None = None
    searxng_url: str | None = None  # e.g. http://192.168.1.5:8888 (not held to the guard)
    max_bytes: int = Field(5_000_000, ge=10_000, le=500_000_000)
    max_redirects: int = Field(5, ge=0, le=20)
    timeout_s: float = Field(20.0, gt=0, le=600)

    @field_validator("search_base_url", "searxng_url", mode="before")
    @classmethod
    def _blank_url_is_unset(cls, value: object) -> object:
        return (value.strip() or None) if isinstance(value, str) else value

    @field_validator("search_base_url", "searxng_url")
    @classmethod
    def _usable_url(cls, value: str | None) -> str | None:
        return None if value is None else http_url(value, "https://search.example.org")

    @field_validator("allow_networks")
    @classmethod
    def _networks(cls, values: list[str]) -> list[str]:
        import ipaddress

        for value in values:
            try:
                ipaddress.ip_network(value, strict=False)
            except ValueError:
                raise ValueError(f"{value!r} is not a network (e.g. 192.168.1.0/24)") from None
        return values

    # Validated after search_provider (field order), so they can name what is missing.
    @field_validator("brave_api_key", "tavily_api_key", "searxng_url")
    @classmethod
    def _needed_by_provider(cls, value: Any, info: ValidationInfo) -> Any:
        provider = info.data.get("search_provider")
        needed = {"brave": "brave_api_key", "tavily": "tavily_api_key", "searxng": "searxng_url"}
        if value is None and needed.get(str(provider)) == info.field_name:
            raise ValueError(f'is required when search_provider = "{provider}"')
        return value


class ShellLimits(_Section):
    """What one command may use (nanomem/tools/limits.py: the same defaults, tested)."""

    memory_mb: int = Field(1024, ge=64)  # address space of each process (RLIMIT_AS)
    processes: int = Field(256, ge=8)  # processes and threads it may add (RLIMIT_NPROC)
    file_size_mb: int = Field(1024, ge=1)  # largest file it may write (RLIMIT_FSIZE)
    open_files: int = Field(1024, ge=16)  # per process (RLIMIT_NOFILE)
    cpu_s: int = Field(300, ge=1)  # CPU seconds per process (RLIMIT_CPU)
    tmpfs_mb: int = Field(256, ge=1)  # each of /tmp, /var/tmp and /dev/shm in the sandbox


class DocumentSettings(_Section):
    """Reading PDFs (a chat's documents, read_file, web_fetch) in a confined child process."""

    timeout_s: float = Field(20.0, gt=0, le=600)
    max_memory_mb: int = Field(1024, ge=128, le=65536)  # a 5 MB page takes ~500 MB
    max_pages: int = Field(1000, ge=1)
    max_decompressed_mb: int = Field(100, ge=1, le=4096)


class ToolSettings(_Section):
    restrict_to_workspace: bool = True
    shell_enabled: bool = False
    shell_timeout_s: float = Field(60.0, gt=0)
    # Environment variables commands may see beyond PATH, HOME, LANG and TERM.
    shell_env: list[str] = []  # not default_factory=list: see TelegramSettings.allow_from
    # "ask": the person is asked in the chat before each command (unless allowlisted);
    # "allowlist": only allowlisted prefixes run; "off": everything runs (unsafe).
    shell_approval: Literal["ask", "allowlist", "off"] = "ask"
    shell_approval_timeout_s: float = Field(120.0, gt=0)
    # "auto": in bubblewrap where it can run, else under the reaper (`nanomem status` says
    # which); "bwrap": sandboxed or not at all; "off": the reaper only.
    shell_sandbox: Literal["auto", "bwrap", "off"] = "auto"
    shell_network: bool = True  # commands in the sandbox may use the network
    # A group room's commands too (they would reach this machine's loopback services).
    shell_network_groups: bool = False
    shell_limits: ShellLimits = ShellLimits()
    max_output_chars: int = Field(16000, ge=500)
    web: WebSettings = WebSettings()
    documents: DocumentSettings = DocumentSettings()


class MemorySettings(_Section):
    # Shares of the prompt budget (context window − max_tokens − a safety margin).
    consolidate_at: float = Field(0.6, gt=0, le=1)
    consolidate_to: float = Field(0.4, gt=0, lt=1)
    keep_recent_turns: int = Field(4, ge=1, le=100)
    max_rounds: int = Field(4, ge=1, le=50)
    history_share: float = Field(0.1, ge=0, le=0.5)
    # A history search stops here and returns what it found, with a note (never blocks a chat).
    search_time_limit_s: float = Field(2.0, gt=0, le=60)
    # In group chats, show USER.md, MEMORY.md and all history as in personal chats.
    groups_see_personal: bool = False

    @model_validator(mode="after")
    def _target_below_trigger(self) -> MemorySettings:
        if self.consolidate_to >= self.consolidate_at:
            raise ValueError("memory.consolidate_to must be smaller than memory.consolidate_at")
        return self


class GatewaySettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(18790, ge=0, le=65535)
    grace_s: float = Field(30.0, ge=0, le=3600)
    # Open HTTP connections (/health and the agent API); more are closed as they arrive.
    max_connections: int = Field(256, ge=4, le=65536)
    # A request's headers must arrive within this, and its body may not stall for longer.
    read_timeout_s: float = Field(15.0, gt=0, le=600)
    # PEM files: set both and the whole server (/health, /v1, the web app) speaks https.
    tls_cert: Annotated[Path | None, BeforeValidator(blank_is_unset)] = None
    tls_key: Annotated[Path | None, BeforeValidator(blank_is_unset)] = None

    @model_validator(mode="after")
    def _tls_pair(self) -> GatewaySettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("gateway.tls_cert and gateway.tls_key are set together or not at all")
        return self

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert is not None else "http"


MIN_KEY_CHARS = 16


def _usable_key(key: SecretStr) -> SecretStr:
    """An API key a client can send and nobody can guess; the error never holds the key."""
    value = key.get_secret_value().strip()  # a header's value loses its outer whitespace
    if not value:
        raise ValueError("is empty: every key must be a real secret")
    if len(value) < MIN_KEY_CHARS:
        raise ValueError(f"is shorter than {MIN_KEY_CHARS} characters")
    if not all("!" <= char <= "~" for char in value):
        raise ValueError("holds a space or a character a Bearer header cannot carry")
    return SecretStr(value)


class ApiSettings(_Section):
    """The OpenAI-compatible agent API, served by the gateway beside GET /health."""

    enabled: bool = False
    # Bearer tokens a client must send; never empty when enabled: `nanomem gateway` (and
    # onboarding) makes one in the config file where there is none.
    keys: list[Annotated[SecretStr, AfterValidator(_usable_key)]] = []
    # Also stream the lines that say which tools the agent calls.
    show_progress: bool = False
    max_body_mb: int = Field(20, ge=1, le=2000)
    # Content parts (text, image_url, input_audio) in the message a request sends: each file is
    # saved and shown to the model, so a flood of them is refused before any is.
    max_parts: int = Field(16, ge=1, le=500)
    # A turn paused on a client's tool waits this long for its result, then is closed.
    tool_wait_s: float = Field(600.0, ge=1, le=86400)


class DreamSettings(_Section):
    enabled: bool = True
    interval_h: float = Field(2.0, gt=0, le=24 * 30)
    max_batch_size: int = Field(20, ge=1, le=500)
    max_iterations: int = Field(10, ge=1, le=100)
    model_override: str | None = None
    max_tokens: int = Field(200_000, ge=1000)
    max_wall_s: float = Field(300.0, gt=0)
    max_delete_share: float = Field(0.25, gt=0, le=1)
    trigger_entries: int = Field(40, ge=1)
    # "ask": a run's edits wait for the owner's /dream-approve (or /dream-reject).
    review: Literal["auto", "ask"] = "auto"
    review_expire_h: float = Field(72.0, gt=0)


class ScheduleSettings(_Section):
    # A schedule missed while the gateway was down runs once at start if it is less late than
    # this; otherwise it is skipped (logged) and its next occurrence stands.
    misfire_grace_min: int = Field(60, ge=0, le=60 * 24 * 30)
    max_per_chat: int = Field(50, ge=1, le=10_000)
    # In all chats together: every one is an APScheduler job, and schedules.json stays small.
    max_total: int = Field(1000, ge=1, le=10_000)
    # What a terminal chat's schedule says when it fires also goes to the owner's private chat
    # on a channel that reaches them (Telegram with telegram.owner): the terminal may be closed.
    terminal_to_owner: bool = True


class LogSettings(_Section):
    level: Literal["TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR", "CRITICAL"] = "INFO"


_MCP_SERVER_NAME = re.compile(r"^[A-Za-z0-9-]{1,24}$")


class McpServerSettings(_Section):
    """One MCP server (features/mcp): a local command spoken to over stdio, or a URL."""

    command: str | None = None  # stdio: the program to start
    url: str | None = None  # streamable HTTP; the older SSE transport when the path ends in /sse
    args: list[str] = []
    env: dict[str, SecretStr] = {}  # the only variables it gets beyond PATH, HOME and LANG
    headers: dict[str, SecretStr] = {}  # sent with every request to a url (Authorization, ...)
    tools: list[str] | None = None  # an allowlist of the server's tool names; None: every tool
    timeout_s: float = Field(60.0, gt=0)  # to start, and for each call
    groups: bool = False  # group chats get its tools too
    enabled: bool = True

    @field_validator("command")
    @classmethod
    def _named_program(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("is empty: name the program that runs the server")
        return value

    @field_validator("url")
    @classmethod
    def _one_transport(cls, value: str | None, info: ValidationInfo) -> str | None:
        if (info.data.get("command") is None) == (value is None):
            raise ValueError("give exactly one of command (a local server) or url (a remote one)")
        return None if value is None else http_url(value, "https://tracker.example/mcp")

    @field_validator("args", "env", "headers")
    @classmethod
    def _for_its_transport(cls, value: Any, info: ValidationInfo) -> Any:
        by_url = info.field_name == "headers"
        if value and info.data.get("url" if by_url else "command") is None:
            raise ValueError(f"is only for a server {'reached by url' if by_url else 'started'}")
        return value


class McpSettings(_Section):
    servers: dict[str, McpServerSettings] = {}
    # What all servers' tools may add to the tools list sent to the model with every turn
    # (our own tools are always sent); a tool past a bound is left out and /mcp says why.
    max_tools: int = Field(128, ge=0)
    max_tools_bytes: int = Field(256 * 1024, ge=1024)
    max_schema_bytes: int = Field(64 * 1024, ge=1024)  # one tool's input schema, as sent

    @field_validator("servers")
    @classmethod
    def _usable_names(cls, value: dict[str, McpServerSettings]) -> dict[str, McpServerSettings]:
        for name in value:
            if not _MCP_SERVER_NAME.match(name):
                raise ValueError(
                    f"server name {name!r}: use 1-24 letters, digits or '-' "
                    "(its tools are named mcp_<server>_<tool>)"
                )
        return value


def _audio_url(value: str | None) -> str | None:
    return None if value is None else http_url(value, "https://api.groq.com/openai/v1")


AudioUrl = Annotated[str | None, BeforeValidator(blank_is_unset), AfterValidator(_audio_url)]


class VoiceSettings(_Section):
    """Voice notes in (transcribed) and spoken replies out (nanomem/features/voice/).

    Unset api_base and api_key: the model connection's, when llm.model is served by an
    OpenAI-compatible API (the lean client's route); otherwise voice is off until they are set."""

    enabled: bool = True
    model: str = "whisper-1"  # /audio/transcriptions; e.g. whisper-large-v3 on Groq
    # e.g. https://api.groq.com/openai/v1, http://localhost:8000/v1; blank is unset
    api_base: AudioUrl = None
    api_key: SecretStr | None = None
    echo: bool = False  # the reply starts with a "heard: ..." line
    max_minutes: float = Field(10.0, gt=0, le=240)  # longer notes are refused before sending
    timeout_s: float = Field(120.0, gt=0, le=3600)
    # "to_voice": a voice note is answered with a voice note too (/audio/speech), and the text
    reply: Literal["never", "to_voice"] = "never"
    speech_model: str = "tts-1"
    speech_voice: str = "alloy"


class Settings(BaseModel):
    """Every setting nanomem reads. Sources, highest first (load_settings): CLI, env,
    config.toml, defaults."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    llm: LLMSettings = LLMSettings()
    agent: AgentSettings = AgentSettings()
    tools: ToolSettings = ToolSettings()
    memory: MemorySettings = MemorySettings()
    dream: DreamSettings = DreamSettings()
    telegram: TelegramSettings = TelegramSettings()
    matrix: MatrixSettings = MatrixSettings()
    discord: DiscordSettings = DiscordSettings()
    slack: SlackSettings = SlackSettings()
    gateway: GatewaySettings = GatewaySettings()
    api: ApiSettings = ApiSettings()
    web: WebAppSettings = WebAppSettings()
    schedule: ScheduleSettings = ScheduleSettings()
    log: LogSettings = LogSettings()
    mcp: McpSettings = McpSettings()
    voice: VoiceSettings = VoiceSettings()


class ConfigError(Exception):
    """Configuration that cannot be used; the message is meant for the person as is."""


def default_home() -> Path:
    return Path(os.environ.get("NANOMEM_HOME") or Path.home() / ".nanomem").expanduser()


def is_loopback(host: str) -> bool:
    """This machine only: `localhost` or a loopback address (a name may resolve anywhere)."""
    if host == "localhost":
        return True
    import ipaddress  # on `nanomem chat`'s way only when a host is checked

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_toml(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
        return tomllib.loads(text)
    except UnicodeDecodeError as exc:  # TOML is UTF-8: a file saved as Latin-1, or damaged
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"config error: {path}: not valid UTF-8 at byte {exc.start} (line {line}); "
            "save it as UTF-8"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        twice = declared_twice(path, text, str(exc))
        raise ConfigError(twice or f"config error in {path}: malformed TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"config error: cannot read {path}: {exc.strerror}") from None


def load_settings(
    config_path: Path,
    overrides: dict[str, Any] | None = None,
    environ: Mapping[str, str] = os.environ,
) -> Settings:
    """Build Settings; a missing file means defaults, anything unusable raises ConfigError."""
    overrides = overrides or {}
    file_data = read_toml(config_path) if config_path.exists() else {}

    merged = _merged(_merged(file_data, from_environment(Settings, environ)), overrides)
    try:
        settings = Settings.model_validate(merged)
    except ValidationError as exc:
        message = describe_errors(exc, config_path, file_data, overrides, Settings)
        raise ConfigError(message) from None
    _check_prompt_room(settings.llm, config_path, file_data, overrides)
    return settings


def _merged(low: dict[str, Any], high: dict[str, Any]) -> dict[str, Any]:
    """`high` over `low`, section by section (a table merged, any other value replaced)."""
    merged = dict(low)
    for key, value in high.items():
        below = merged.get(key)
        both = isinstance(value, dict) and isinstance(below, dict)
        merged[key] = _merged(below, value) if both else value  # type: ignore[arg-type]
    return merged


def prompt_room(llm: LLMSettings) -> int:
    """Tokens left for the prompt: the context window minus the reply and a safety margin."""
    return _room(llm.context_window_tokens, llm.max_tokens)


def _room(window: int, max_tokens: int) -> int:
    return window - max_tokens - max(256, window // 20)


def _check_prompt_room(
    llm: LLMSettings, path: Path, file_data: dict[str, Any], overrides: dict[str, Any]
) -> None:
    """A window that the reply alone fills would only fail at the first long turn."""
    if prompt_room(llm) >= MIN_PROMPT_TOKENS:
        return
    window, reply = ("llm", "context_window_tokens"), ("llm", "max_tokens")
    # The smallest window that fits: the margin is 5 % of it past ~5k tokens.
    needed = max(
        llm.max_tokens + MIN_PROMPT_TOKENS + 256, (llm.max_tokens + MIN_PROMPT_TOKENS) * 20 // 19
    )
    while _room(needed - 1, llm.max_tokens) >= MIN_PROMPT_TOKENS:
        needed -= 1
    while _room(needed, llm.max_tokens) < MIN_PROMPT_TOKENS:
        needed += 1
    raise ConfigError(
        f"config error: llm.context_window_tokens ({llm.context_window_tokens}, "
        f"{source_in(window, path, file_data, overrides)}) leaves no room for a prompt after "
        f"llm.max_tokens ({llm.max_tokens}, {source_in(reply, path, file_data, overrides)}) "
        f"and a 5 % margin: make the window at least {needed} tokens or max_tokens smaller"
    )


def source_of(config_path: Path, overrides: dict[str, Any], section: str, key: str) -> str:
    """Where a setting's value came from, named as config errors name it."""
    file_data = read_toml(config_path) if config_path.exists() else {}
    return source_in((section, key), config_path, file_data, overrides)
