"""The Matrix channel's check: its access token asked who it is (`/account/whoami`) on the
homeserver, or its password noted (it logs in at start)."""

from __future__ import annotations

from dataclasses import replace
from importlib.util import find_spec

from nanomem.channel_settings import MatrixSettings
from nanomem.doctor.finding import Finding
from nanomem.doctor.services import get_json
from nanomem.text.masking import masked, secret_of, shown_url

SET_LOGIN = (
    "nanomem config set matrix.homeserver https://…, matrix.user_id @bot:server and "
    "matrix.access_token (see docs/matrix.md)"
)


INSTALL_E2E = "pip install 'nanomem[e2e]' (matrix-nio's crypto: vodozemac, a binary wheel)"


def e2e_state(settings: MatrixSettings) -> str | None:
    """What matrix.e2e comes to here: None when it is off."""
    if not settings.e2e:
        return None
    if find_spec("vodozemac") is None or find_spec("peewee") is None:
        return (
            "matrix.e2e is set, but the e2e extra is missing: encrypted rooms get one note "
            f"instead of answers; {INSTALL_E2E}"
        )
    return "end-to-end encryption on (devices trusted on first use, not verified)"


async def matrix(settings: MatrixSettings) -> Finding:
    finding = await _login(settings)
    e2e = e2e_state(settings)
    if e2e is None or finding.level == "fail":
        return finding
    if "missing" in e2e:
        return Finding.warn("matrix", f"{finding.found}; {e2e}", INSTALL_E2E)
    return replace(finding, found=f"{finding.found}; {e2e}")


async def _login(settings: MatrixSettings) -> Finding:
    token, password = secret_of(settings.access_token), secret_of(settings.password)
    if not settings.homeserver or not settings.user_id or not (token or password):
        return Finding.fail("matrix", "matrix.enabled, but the login is incomplete", SET_LOGIN)
    where = shown_url(settings.homeserver)
    if not token:
        return Finding.warn(
            "matrix",
            f"{settings.user_id} on {where}: logs in with its password at start",
            "prefer an access token: nanomem config set matrix.access_token …",
        )
    try:
        url = f"{settings.homeserver.rstrip('/')}/_matrix/client/v3/account/whoami"
        status, body = await get_json(url, headers={b"Authorization": f"Bearer {token}".encode()})
    except Exception as exc:  # the connection's errors name the host, never the token
        return Finding.fail(
            "matrix",
            f"could not reach {where} ({type(exc).__name__})",
            "check the network and matrix.homeserver",
        )
    if status == 401:
        return Finding.fail(
            "matrix", f"{where} refused the access token ({masked(token)})", SET_LOGIN
        )
    user = body.get("user_id") if isinstance(body, dict) else None
    if status != 200 or not isinstance(user, str):
        return Finding.fail(
            "matrix",
            f"{where} answered {status}, not a homeserver's whoami",
            "check matrix.homeserver (the client-server API's address)",
        )
    if user != settings.user_id:
        fix = f"nanomem config set matrix.user_id {user}"
        return Finding.fail("matrix", f"the access token is {user}'s, not {settings.user_id}", fix)
    if settings.owner is None:
        fix = "nanomem config set matrix.owner @you:your.server"
        return Finding.warn("matrix", f"{user} on {where}; no owner set", fix)
    return Finding.ok("matrix", f"{user} on {where}, owner {settings.owner}")
