"""What the web app shows the world: the security headers on every page, redirect, error and
static file (and /health and /v1 as they were); where it refuses to listen in the clear, and
https when it has a certificate; the token in no log and no page; hostile text in the login's
address shown as text in a real browser."""

from __future__ import annotations

import datetime
import re
import ssl
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from playwright.sync_api import Browser

from channels.web.auth import SECURITY_HEADERS
from channels.web.channel import STATIC_DIR
from nanomem.home import Home
from tests.conftest import cli_env, run_cli
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.browser import WEB_TOKEN, base_url, web_gateway
from tests.helpers.gateway import API_KEY, GatewayProcess, onboarded
from tests.helpers.web_login import logged_in, routes
from tests.helpers.xss import CORPUS, watch

pytestmark = pytest.mark.slow

CSP = SECURITY_HEADERS["Content-Security-Policy"]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    home: Home = onboarded(tmp_path_factory, "web-surface")
    api = {"NANOMEM_API__ENABLED": "true", "NANOMEM_API__KEYS": f'["{API_KEY}"]'}
    with FakeOpenAI() as llm, web_gateway(home, llm, **api) as running:
        yield running


def pages(home: Home) -> list[str]:
    """Every GET address of the web app (a placeholder filled in), and every static file."""
    found = [path for method, path in routes(home) if method == "GET" and path != "/static"]
    files = sorted(p for p in STATIC_DIR.rglob("*") if p.is_file())
    assert files and "/chat" in found  # the enumeration sees what is there
    return [*found, *(f"/static/{p.relative_to(STATIC_DIR).as_posix()}" for p in files)]


def test_every_answer_of_the_web_app_carries_the_headers(gateway: GatewayProcess) -> None:
    client, csrf = logged_in(base_url(gateway))
    stranger = httpx.Client(base_url=base_url(gateway), follow_redirects=False)
    seen: list[str] = []
    for path in [*pages(gateway.home), "/static/none.js", "/login/not-a-code", "/chat/c/%00"]:
        for who in (client, stranger):
            with who.stream("GET", path) as answer:  # a stream of events is never read to its end
                events = answer.headers.get("content-type", "").startswith("text/event-stream")
                if not events:
                    seen.append(answer.read().decode(errors="replace"))
            for name, value in SECURITY_HEADERS.items():
                if name == "Cache-Control" and path.startswith("/static/"):
                    value = "no-cache" if answer.status_code == 200 else value
                if name == "Cache-Control" and events:  # its own "no-cache" may stand
                    assert answer.headers.get(name) in ("no-cache", "no-store"), path
                    continue
                assert answer.headers.get(name) == value, (path, answer.status_code, name)
            assert "strict-transport-security" not in answer.headers  # plain http here
    refused = client.post("/logout")  # no CSRF token: the refusal has them too
    assert refused.status_code == 403 and refused.headers["content-security-policy"] == CSP
    assert not any(WEB_TOKEN in text for text in seen)
    assert csrf not in stranger.get("/login").text


def test_health_and_the_agent_api_keep_their_own_headers(gateway: GatewayProcess) -> None:
    base = base_url(gateway)
    health = httpx.get(f"{base}/health")
    models = httpx.get(f"{base}/v1/models", headers={"Authorization": f"Bearer {API_KEY}"})
    assert health.status_code == 200 and models.status_code == 200
    for answer in (health, models):
        assert "content-security-policy" not in answer.headers
        assert "x-frame-options" not in answer.headers
        assert answer.headers["content-type"].startswith("application/json")


def test_the_token_is_in_no_log(gateway: GatewayProcess) -> None:
    logs = gateway.logged()
    assert WEB_TOKEN not in "".join(gateway.lines) and WEB_TOKEN not in logs
    assert "the web app" in "".join(gateway.lines)  # the log does speak of it


def test_hostile_text_in_the_logins_address_stays_text(
    browser: Browser, gateway: GatewayProcess
) -> None:
    base = base_url(gateway)
    context = browser.new_context()
    page = context.new_page()
    watched = watch(context, page)
    for text in CORPUS:
        for shown in (f"{base}/login?next={quote(text, safe='')}", f"{base}/login/{quote(text)}"):
            answer = page.goto(shown)
            assert answer is not None
            if answer.status != 404:  # a code with a "/" is no code: aiohttp's 404
                assert page.get_by_role("heading", name="nanomem").is_visible()
            assert "49" not in page.locator("body").inner_text()
        page.goto(f"{base}/login?next={quote('/' + text, safe='')}")
        assert page.locator("input[name=next]").input_value() in ("/", "/" + text)
    # Typed as the token and sent back in the error page: four tries, under the rate limit.
    for text in [t for t in CORPUS if '"' in t or "'" in t][:4]:
        page.goto(f"{base}/login?next={quote('/' + text, safe='')}")
        page.get_by_label("Token").fill(text)
        page.get_by_role("button", name="Log in").click()
        assert page.get_by_role("alert").inner_text() == "That token is wrong."
    watched.assert_clean()
    context.close()


# Refusing to listen in the clear, and https with a certificate.


def self_signed(folder: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    import ipaddress

    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_file.chmod(0o600)
    return cert_file, key_file


def test_off_loopback_in_the_clear_the_gateway_refuses_to_start(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    with FakeOpenAI() as llm:
        for host in ("0.0.0.0", "::", "192.0.2.10"):
            env = cli_env(
                home,
                llm,
                NANOMEM_WEB__ENABLED="true",
                NANOMEM_WEB__TOKEN=WEB_TOKEN,
                NANOMEM_GATEWAY__HOST=host,
                NANOMEM_GATEWAY__PORT="0",
            )
            done = run_cli("gateway", env=env, timeout=60)
            assert done.returncode == 2, done.stderr
            assert f"will not serve gateway.host = '{host}'" in done.stderr
            assert "gateway.tls_cert" in done.stderr and "web.behind_proxy" in done.stderr
            assert "Traceback" not in done.stderr and WEB_TOKEN not in done.stderr
        broken = cli_env(
            home,
            llm,
            NANOMEM_GATEWAY__TLS_CERT=str(tmp_path / "none.pem"),
            NANOMEM_GATEWAY__TLS_KEY=str(tmp_path / "none.key"),
            NANOMEM_GATEWAY__PORT="0",
        )
        done = run_cli("gateway", env=broken, timeout=60)
        assert done.returncode == 2 and "none.pem does not exist" in done.stderr, done.stderr


def test_with_a_certificate_everything_is_https(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    cert, key = self_signed(tmp_path)
    tls = {"NANOMEM_GATEWAY__TLS_CERT": str(cert), "NANOMEM_GATEWAY__TLS_KEY": str(key)}
    with FakeOpenAI() as llm, web_gateway(home, llm, **tls) as running:
        base = f"https://127.0.0.1:{running.port}"
        trusting = ssl.create_default_context(cafile=str(cert))
        with httpx.Client(base_url=base, verify=trusting, follow_redirects=False) as client:
            answer = client.post("/login", data={"token": WEB_TOKEN})
            assert answer.status_code == 303
            cookie = answer.headers["set-cookie"]
            assert re.search(r"; *Secure", cookie) and "HttpOnly" in cookie
            assert answer.headers["strict-transport-security"].startswith("max-age=")
            assert client.get("/health").status_code == 200
            assert client.get("/chat").status_code == 200
        with pytest.raises(httpx.HTTPError):  # no plain http on that port
            httpx.get(f"http://127.0.0.1:{running.port}/health", timeout=5)
        assert re.search(r"web: https://127\.0\.0\.1:\d+/", "".join(running.lines))
        doctor = run_cli("doctor", env=running.env).stdout
        assert re.search(r"^✓ web app +can start at https://", doctor, re.M), doctor
        assert re.search(rf"^✓ gateway +pid \d+ serves https; curl --cacert {cert}", doctor, re.M)
