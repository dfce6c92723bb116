"""Checks of what nanomem talks to besides the model: Telegram (`getMe`), the agent API's keys,
each MCP server (started and asked for its tools, as the MCP feature does) and a gateway
running on this home (`GET /health`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from nanomem.config import McpServerSettings, Settings, TelegramSettings
from nanomem.doctor.finding import Finding
from nanomem.text.masking import masked, secret_of, shown_url

if TYPE_CHECKING:
    from nanomem.gateway.claim import Running

HTTP_TIMEOUT_S = 10.0
MAX_ANSWER = 64 * 1024  # getMe and /health are small: a longer answer is not theirs
SET_TOKEN = "nanomem config set telegram.token <the token @BotFather gave>"


async def get_json(
    url: str, proxy: str | None = None, headers: dict[bytes, bytes] | None = None
) -> tuple[int, Any]:
    """(status, the JSON body or None) of a GET through the lean client's connection (its
    proxy and TLS decisions), the body read to MAX_ANSWER at most. TimeoutError, or
    ConnectionFailed with a message that names the host, never the path (a bot token)."""
    from nanomem.providers import Connection

    connection = Connection(url, timeout_s=HTTP_TIMEOUT_S, connections=1, configured=proxy)
    try:
        async with connection.get(headers) as answer:
            status, body = answer.status, await answer.excerpt(MAX_ANSWER)
    finally:
        await connection.close()
    try:
        return status, json.loads(body)
    except ValueError:
        return status, None


async def telegram(settings: TelegramSettings) -> Finding:
    from nanomem.providers import ConnectionFailed

    token = secret_of(settings.token)
    if not token:
        return Finding.fail("telegram", "telegram.enabled, but no token is set", SET_TOKEN)
    shown = f"{shown_url(settings.base_url)}{masked(token)}/getMe"
    try:
        status, body = await get_json(f"{settings.base_url}{token}/getMe", settings.proxy)
    except TimeoutError:
        fix = "check the network, or telegram.proxy"
        return Finding.fail("telegram", f"no answer from {shown} within {HTTP_TIMEOUT_S:g} s", fix)
    except ConnectionFailed as exc:
        fix = "check the network, telegram.base_url or telegram.proxy"
        return Finding.fail("telegram", f"could not reach {shown} ({exc})", fix)
    ok = isinstance(body, dict) and body.get("ok") is True and isinstance(body.get("result"), dict)
    if status in (401, 404) or (isinstance(body, dict) and body.get("error_code") == 401):
        return Finding.fail(
            "telegram", f"{shown}: Telegram refused the token ({status})", SET_TOKEN
        )
    if not ok:
        return Finding.fail(
            "telegram", f"{shown} answered {status}, not a bot", "check telegram.base_url"
        )
    name = body["result"].get("username", "?")
    hook = ""
    if settings.mode == "webhook":
        found = await _webhook(settings, token)
        if isinstance(found, Finding):
            return found
        hook = f", {found}"
    owner = settings.owner_id
    if owner is None:
        fix = "nanomem config set telegram.owner <your numeric user id>"
        return Finding.warn("telegram", f"bot @{name}; no owner set{hook}", fix)
    return Finding.ok("telegram", f"bot @{name} ({shown}), owner {owner}{hook}")


async def _webhook(settings: TelegramSettings, token: str) -> Finding | str:
    """What Telegram says of the webhook (getWebhookInfo): a failure or warning, or the words
    for an ok line."""
    from nanomem.providers import ConnectionFailed

    if problem := settings.webhook_problem():
        return Finding.fail("telegram", problem, "fix telegram.webhook_url (docs/telegram.md)")
    url = settings.webhook_url or ""
    try:
        _, body = await get_json(f"{settings.base_url}{token}/getWebhookInfo", settings.proxy)
    except (TimeoutError, ConnectionFailed) as exc:
        return Finding.warn("telegram", f"getWebhookInfo failed ({exc or 'no answer'})", "")
    info = body.get("result") if isinstance(body, dict) else None
    if not isinstance(info, dict):
        return Finding.warn("telegram", "getWebhookInfo gave no answer to read", "")
    told, waiting = info.get("url") or "", info.get("pending_update_count", 0)
    restart = "start `nanomem gateway` (it sets the webhook at start)"
    if told != url:
        where = f"to {shown_url(str(told))}" if told else "nowhere (no webhook set)"
        return Finding.warn("telegram", f"Telegram posts {where}, not to {shown_url(url)}", restart)
    if (error := info.get("last_error_message")) and waiting:
        path = urlsplit(url).path
        fix = f"check that the reverse proxy passes {path} to the gateway (docs/telegram.md)"
        said = f"webhook {shown_url(url)}: {waiting} waiting, Telegram's last error: {error}"
        return Finding.warn("telegram", said, fix)
    return f"webhook {shown_url(url)} ({waiting} waiting)"


def api(settings: Settings) -> Finding:
    keys = settings.api.keys
    if keys:
        shown = ", ".join(masked(key.get_secret_value()) for key in keys)
        return Finding.ok("agent api", f"{len(keys)} key(s): {shown}")
    fix = "start `nanomem gateway` once: it writes one into the config"
    return Finding.warn(
        "agent api", "enabled, no keys yet (it answers no request without one)", fix
    )


def web_app(settings: Settings) -> Finding:
    """Whether the web app can start: a token, an address it may serve, TLS files that load."""
    from nanomem.config import ConfigError
    from nanomem.gateway.health import tls_context

    web, gw = settings.web, settings.gateway
    if web.token is None:
        fix = "start `nanomem gateway` once: it writes one into the config (web.token)"
        return Finding.warn("web app", "enabled, no token yet (nobody can log in)", fix)
    if problem := web.start_problem(gw.host, gw.tls_cert is not None):
        return Finding.fail("web app", f"will not start on {gw.host}", problem)
    try:
        tls_context(gw)
    except ConfigError as exc:
        return Finding.fail("web app", "the gateway's TLS files cannot be used", str(exc))
    where = f"{gw.scheme}://{gw.host}:{gw.port}/"
    how = ", behind a proxy" if web.behind_proxy else ""
    return Finding.ok("web app", f"can start at {where}{how}; token set")


async def mcp_server(name: str, server: McpServerSettings, settings: Settings) -> Finding:
    """Started as the MCP feature starts it, until it lists its tools or fails, then stopped."""
    from nanomem.features.mcp import probe

    label = f"mcp {name}"
    found = await probe(name, server, settings.mcp)
    if found.state.kind == "ready":
        return Finding.ok(label, f"{found.transport}: started, {found.tools} tools listed")
    reason = found.state.reason or f"no tools listed within {server.timeout_s:g} s"
    if server.command is not None and reason.startswith("command not found"):
        program = f"install {server.command} (Node.js for npx, uv for uvx)"
        fix = f"{program}, or give mcp.servers.{name}.command its full path"
    else:
        fix = f"run its command by hand to see the error, or raise mcp.servers.{name}.timeout_s"
    return Finding.fail(label, f"{found.transport}: {reason}", fix)


async def gateway(found: Running | None, host: str, tls_cert: Path | None = None) -> Finding:
    from nanomem.providers import ConnectionFailed

    if found is None:
        return Finding.ok("gateway", "none runs on this home (`nanomem gateway` starts one)")
    if not found.port:
        return Finding.warn("gateway", f"starting ({found.describe()}); no port announced yet")
    near = "127.0.0.1" if host in ("0.0.0.0", "") else "[::1]" if host == "::" else host
    if tls_cert is not None:  # its certificate names a public host, or none this machine trusts
        url = f"https://{near}:{found.port}/health"
        fix = f"curl --cacert {tls_cert} {url} (or -k) shows its health"
        return Finding.ok("gateway", f"pid {found.pid} serves https; {fix}")
    url = f"http://{near}:{found.port}/health"
    try:
        status, body = await get_json(url)
    except (TimeoutError, ConnectionFailed) as exc:
        fix = f"its log says why; kill -TERM {found.pid} and start it again" if found.pid else ""
        said = str(exc) or f"nothing within {HTTP_TIMEOUT_S:g} s"
        return Finding.fail("gateway", f"pid {found.pid}: {url} did not answer ({said})", fix)
    if status == 200:
        said = f"pid {found.pid}: {url} answers 200"
        if isinstance(body, dict) and body.get("status") == "warning":
            return Finding.warn("gateway", f"{said}, with a warning", f"curl {url} shows it")
        return Finding.ok("gateway", said)
    down = ""
    if isinstance(body, dict) and isinstance(body.get("channels"), dict):
        down = ", ".join(
            f"{name} {report.get('state')}"
            for name, report in body["channels"].items()
            if isinstance(report, dict) and report.get("state") != "up"
        )
    found_text = f"pid {found.pid}: {url} answers {status}" + (f" ({down})" if down else "")
    return Finding.fail("gateway", found_text, "the gateway's log says why (~/.nanomem/logs/)")
