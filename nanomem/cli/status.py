"""What `nanomem status` shows: the settings in force and the state on disk, never a secret,
and never a call to the model (`nanomem doctor` makes the calls)."""

from __future__ import annotations

from pathlib import Path

from nanomem.config import Settings, TelegramSettings
from nanomem.home import Home


def status_rows(
    home: Home, settings: Settings, config: Path, version: str
) -> list[tuple[str, str]]:
    from nanomem.app import workspace_of
    from nanomem.features.schedules import ScheduleStore
    from nanomem.gateway.claim import running
    from nanomem.memory import SessionStore
    from nanomem.providers import model_name_problem, route
    from nanomem.text.masking import masked, secret_of

    llm, gw = settings.llm, settings.gateway
    workspace = workspace_of(settings, home)
    gateway = running(home)
    path = route(llm).describe() if llm.model else "(no model)"
    if problem := model_name_problem(llm.model, llm.api_base):
        path = f"(none) {problem}"
    return [
        ("version", version),
        ("home", str(home.root)),
        ("config", f"{config}" + ("" if config.exists() else " (missing: run nanomem onboard)")),
        ("workspace", f"{workspace}" + ("" if workspace.is_dir() else " (missing)")),
        ("model", llm.model or "(not set: llm.model / NANOMEM_LLM__MODEL)"),
        ("api base", llm.api_base or "(provider default)"),
        ("model path", path),
        ("model answers", "not checked here: `nanomem doctor` checks the model answers"),
        ("api key", f"set ({masked(key)})" if (key := secret_of(llm.api_key)) else "not set"),
        ("context window", f"{llm.context_window_tokens} tokens"),
        ("shell tool", "enabled" if settings.tools.shell_enabled else "disabled"),
        ("shell sandbox", _sandbox_state(settings)),
        ("web tools", _web_line(settings)),
        ("voice", _voice_line(settings)),
        ("gateway", "not running" if gateway is None else f"running ({gateway.describe()})"),
        ("gateway at", f"{gw.host}:{gw.port}, at most {gw.max_connections} connections"),
        ("agent api", _api_line(settings)),
        ("web app", _web_app_line(settings, gateway.port if gateway is not None else None)),
        *_telegram_rows(settings, home),
        *_matrix_rows(settings),
        *_slack_rows(settings),
        *_discord_rows(settings),
        ("sessions", str(SessionStore(home.sessions).count())),
        ("schedules", ScheduleStore.of(home, settings.schedule).summary()),
        *_mcp_rows(home, settings, gateway.pid if gateway is not None else None),
        ("log file", str(home.logs / "nanomem.log")),
    ]


def _web_app_line(settings: Settings, port: int | None) -> str:
    """On or off, where, and whether a token is set (never the token, not even masked)."""
    from nanomem.cli.web_setup import web_address

    web, gw = settings.web, settings.gateway
    if not web.enabled:
        return "off (web.enabled)"
    token = "token set" if web.token is not None else "no token yet (`nanomem gateway` makes one)"
    said = f"on at {web_address(gw, port or None)}/, {token}"
    if web.token is not None and (problem := web.start_problem(gw.host, gw.tls_cert is not None)):
        return f"{said}; will not start: {problem}"
    return said + (", behind a proxy" if web.behind_proxy else "")


def _mcp_rows(home: Home, settings: Settings, gateway: int | None) -> list[tuple[str, str]]:
    """Each MCP server's state, as the running gateway or chat last wrote it (a gateway's own
    servers are listed even when the config no longer names them)."""
    servers = settings.mcp.servers
    if not servers and gateway is None:
        return []
    from nanomem.features.mcp import status_lines  # not the SDK: a small file read

    configured = {name: s.enabled for name, s in servers.items()}
    return status_lines(home.mcp_state, configured, gateway)


def _telegram_rows(settings: Settings, home: Home) -> list[tuple[str, str]]:
    """Whether the Telegram channel can start, who it lets in, how updates come (shown when
    enabled); by webhook, what Telegram last said of it, as the gateway checked."""
    from nanomem.text.masking import masked, secret_of
    from nanomem.text.plural import plural

    telegram = settings.telegram
    if not telegram.enabled:
        return []
    token = secret_of(telegram.token)
    owner = telegram.owner_id
    return [
        (
            "telegram",
            ", ".join(
                (
                    f"token set ({masked(token)})"
                    if token
                    else "token missing (telegram.token / NANOMEM_TELEGRAM__TOKEN)",
                    f"owner {owner}" if owner is not None else "no owner (telegram.owner)",
                    f"{plural(len(telegram.allow_from), 'user')} in allow_from",
                    "polling getUpdates" if telegram.mode == "polling" else _webhook_mode(telegram),
                )
            ),
        ),
        *([("telegram webhook", _webhook_said(home))] if telegram.mode == "webhook" else []),
    ]


def _matrix_rows(settings: Settings) -> list[tuple[str, str]]:
    """Whether the Matrix channel can log in, and who it lets in (shown when enabled)."""
    from nanomem.text.masking import masked, secret_of

    matrix = settings.matrix
    if not matrix.enabled:
        return []
    token, password = secret_of(matrix.access_token), secret_of(matrix.password)
    login = (
        f"access token set ({masked(token)})"
        if token
        else "password set (logs in at start)"
        if password
        else "no login (matrix.access_token / NANOMEM_MATRIX__ACCESS_TOKEN)"
    )
    from nanomem.doctor.matrix import e2e_state

    who = matrix.user_id or "no user id (matrix.user_id)"
    e2e = e2e_state(matrix)
    admitted = _admitted("matrix", matrix.owner, matrix.allow_from)
    return [("matrix", ", ".join((who, login, *admitted, *([e2e] if e2e else []))))]


def _slack_rows(settings: Settings) -> list[tuple[str, str]]:
    """Whether the Slack channel can start, and who it lets in (shown when enabled)."""
    from nanomem.text.masking import masked, secret_of

    slack = settings.slack
    if not slack.enabled:
        return []
    token, app_token = secret_of(slack.bot_token), secret_of(slack.app_token)
    mode = (
        (
            f"Socket Mode (app token {masked(app_token)})"
            if app_token
            else "Socket Mode: app_token missing"
        )
        if slack.mode == "socket"
        else "Events API at /slack/events"
    )
    row = [
        f"bot token set ({masked(token)})" if token else "bot token missing (slack.bot_token)",
        *_admitted("slack", slack.owner, slack.allow_from, "member"),
        mode,
    ]
    return [("slack", ", ".join(row))]


def _admitted(
    section: str, owner: str | None, allow_from: list[str], who: str = "user"
) -> tuple[str, str]:
    """Who a messenger lets in: its owner, and how many others its allow_from names."""
    from nanomem.text.plural import plural

    said = f"owner {owner}" if owner else f"no owner ({section}.owner)"
    return said, f"{plural(len(allow_from), who)} in allow_from"


def _webhook_mode(telegram: TelegramSettings) -> str:
    from nanomem.text.masking import shown_url

    if problem := telegram.webhook_problem():
        return f"webhook: cannot start: {problem}"
    return f"webhook at {shown_url(telegram.webhook_url or '')}"


def _webhook_said(home: Home) -> str:
    """Telegram's word on the webhook (getWebhookInfo) when the gateway last checked it."""
    import json

    try:
        said = json.loads(home.telegram_webhook.read_text(encoding="utf-8"))
        checked, url, waiting = said["checked_at"], said["url"], said["pending_update_count"]
    except (OSError, ValueError, TypeError, KeyError):
        return "not checked yet (the gateway asks Telegram at start, then every minute)"
    from nanomem.text.masking import shown_url

    where = f"posts to {shown_url(url)}" if url else "no webhook set"
    line = f"Telegram at {checked}: {where}, {waiting} waiting"
    if error := said.get("last_error_message"):
        line += f"; last delivery error at {said.get('last_error_date')}: {error}"
    from nanomem.text.escapes import strip_escapes

    return strip_escapes(line)  # what a server said: never a terminal escape


def _discord_rows(settings: Settings) -> list[tuple[str, str]]:
    """Whether the Discord channel can start, and who it lets in (shown when enabled)."""
    from nanomem.text.masking import masked, secret_of

    discord = settings.discord
    if not discord.enabled:
        return []
    token = secret_of(discord.token)
    said = [
        f"token set ({masked(token)})" if token else "token missing (discord.token)",
        *_admitted("discord", discord.owner, discord.allow_from),
    ]
    return [("discord", ", ".join(said))]


def _sandbox_state(settings: Settings) -> str:
    from nanomem.tools import Limits, decide

    tools = settings.tools
    return decide(tools.shell_sandbox).describe(
        tools.shell_network, tools.shell_network_groups, Limits(**tools.shell_limits.model_dump())
    )


def _web_line(settings: Settings) -> str:
    """web_fetch and web_search: on or off, the search provider, what the guard lets through."""
    from nanomem.text.masking import masked, secret_of

    web = settings.tools.web
    if not web.enabled:
        return "disabled (tools.web.enabled)"
    key = secret_of(
        {"brave": web.brave_api_key, "tavily": web.tavily_api_key}.get(web.search_provider)
    )
    where = ""
    if key:
        where = f", key {masked(key)}"
    elif web.search_provider == "searxng" and web.searxng_url:
        where = f" at {web.searxng_url}"
    if web.allow_private:
        reach = "this machine and private networks allowed (tools.web.allow_private)"
    elif web.allow_networks:
        reach = f"public addresses and {', '.join(web.allow_networks)}"
    else:
        reach = "public addresses only"
    return f"enabled, search by {web.search_provider}{where}; {reach}"


def _voice_line(settings: Settings) -> str:
    """Off (and why), or where recordings go and from which settings: never the key."""
    from nanomem.features.voice import audio_endpoint

    voice = settings.voice
    if not voice.enabled:
        return "off (voice.enabled)"
    endpoint = audio_endpoint(settings)
    if endpoint is None:
        return "off: set voice.api_base (the model's connection is not OpenAI-compatible)"
    spoken = f", spoken replies by {voice.speech_model}" if voice.reply == "to_voice" else ""
    return f"{voice.model} at {endpoint.describe()}{spoken}"


def _api_line(settings: Settings) -> str:
    """Whether the API is on, and its keys as their owner may see them: masked."""
    from nanomem.text.masking import masked
    from nanomem.text.plural import plural

    api = settings.api
    state = "enabled" if api.enabled else "disabled"
    if keys := ", ".join(masked(key.get_secret_value()) for key in api.keys):
        return f"{state}, {plural(len(api.keys), 'key')} ({keys})"
    if api.enabled:  # it never answers without one
        return "enabled, no keys yet (`nanomem gateway` makes one in the config file)"
    return f"{state}, no keys"
