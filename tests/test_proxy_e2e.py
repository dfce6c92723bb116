"""The real `nanomem` behind an HTTP proxy and a SOCKS5 proxy: the lean client reaches a model
host that only the proxy can reach, and neither status, the log nor the sessions show the
proxy's password."""

from pathlib import Path

import pytest

from nanomem.home import Home
from tests.conftest import cli_env, run_cli
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.proxy_server import FakeProxy, make_certificate, server_context
from tests.fakes.socks_server import FakeSocks

TARGET = "model.example.test"  # resolves nowhere: only the proxy reaches it
PASSWORD = "pr0xy-s3cret"


def proxied_env(home: Home, server: FakeOpenAI, proxy_url: str, cert: Path) -> dict[str, str]:
    env = without_proxies(cli_env(home, server))
    env.update(
        HTTPS_PROXY=proxy_url,
        SSL_CERT_FILE=str(cert),  # the system trusts the model host's certificate
        NANOMEM_LLM__API_BASE=f"https://{TARGET}/v1",
        NANOMEM_LLM__MAX_RETRIES="0",
    )
    return env


def without_proxies(env: dict[str, str]) -> dict[str, str]:
    """No proxy variable from the machine running the tests."""
    for name in ("https_proxy", "http_proxy", "all_proxy", "no_proxy"):
        env.pop(name, None)
        env.pop(name.upper(), None)
    return env


def test_chat_goes_through_the_proxy_on_the_lean_client(
    home: Home, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    certificate = make_certificate(tmp_path, TARGET)
    if certificate is None:
        pytest.skip("the openssl command makes the test certificate")
    fake_llm.reply("Hello through the proxy")
    port = int(fake_llm.base_url.split(":")[2].split("/")[0])
    tls = server_context(certificate)  # the proxy plays the model host's TLS end
    with FakeProxy(port, credentials=("me", PASSWORD), terminate=tls) as proxy:
        url = proxy.url.replace("://", f"://me:{PASSWORD}@")
        env = proxied_env(home, fake_llm, url, certificate[0])
        chat = run_cli("chat", "-m", "hi", env=env)
        status = run_cli("status", env=env)
        wrong = {**env, "HTTPS_PROXY": url.replace(PASSWORD, f"{PASSWORD}x")}
        refused = run_cli("chat", "-m", "again", env=wrong)
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout == "Hello through the proxy\n"
    assert proxy.connects[0] == f"{TARGET}:443" and len(fake_llm.requests) == 1
    assert status.returncode == 0, status.stderr
    path = next(line for line in status.stdout.splitlines() if "model path" in line)
    assert "lean client" in path and f"through the proxy at {proxy.url}" in path
    assert refused.returncode != 0
    assert f"could not reach the model service through the proxy at {proxy.url}" in refused.stderr
    log = "".join(p.read_text() for p in (home.root / "logs").glob("*.log"))
    assert f"the proxy at 127.0.0.1:{proxy.port} refused the tunnel" in log and "407" in log
    shown = chat.stdout + chat.stderr + status.stdout + status.stderr
    shown += refused.stdout + refused.stderr
    assert PASSWORD not in shown
    written = [p for p in home.root.rglob("*") if p.is_file() and "memory.git" not in p.parts]
    assert any(p.suffix == ".jsonl" for p in written) and any(p.suffix == ".log" for p in written)
    assert not [p for p in written if PASSWORD.encode() in p.read_bytes()]


# Where the proxy is given: the environment, or the llm.proxy setting (which wins over it).
SOCKS_FROM = ["ALL_PROXY", "NANOMEM_LLM__PROXY"]


@pytest.mark.parametrize("variable", SOCKS_FROM)
def test_chat_goes_through_a_socks5_proxy_on_the_lean_client(
    home: Home, fake_llm: FakeOpenAI, variable: str
) -> None:
    fake_llm.reply("Hello through SOCKS")
    port = int(fake_llm.base_url.split(":")[2].split("/")[0])
    with FakeSocks(port, credentials=("me", PASSWORD)) as socks:
        url = socks.url.replace("://", f"://me:{PASSWORD}@")
        env = without_proxies(cli_env(home, fake_llm))
        env.update(
            NANOMEM_LLM__API_BASE=f"http://{TARGET}:8000/v1",
            NANOMEM_LLM__MAX_RETRIES="0",
        )
        env[variable] = url
        if variable != "ALL_PROXY":  # the setting wins over a proxy the environment names
            env["ALL_PROXY"] = "socks5://127.0.0.1:9"
        chat = run_cli("chat", "-m", "hi", env=env)
        status = run_cli("status", env=env)
        wrong = {**env, variable: url.replace(PASSWORD, f"{PASSWORD}x")}
        refused = run_cli("chat", "-m", "again", env=wrong)
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout == "Hello through SOCKS\n"
    assert socks.connects[0] == f"{TARGET}:8000" and len(fake_llm.requests) == 1
    assert status.returncode == 0, status.stderr
    path = next(line for line in status.stdout.splitlines() if "model path" in line)
    assert "lean client" in path and f"through the proxy at {socks.url}" in path
    assert refused.returncode != 0
    assert f"could not reach the model service through the proxy at {socks.url}" in refused.stderr
    log = "".join(p.read_text() for p in (home.root / "logs").glob("*.log"))
    assert f"the proxy at 127.0.0.1:{socks.port} refused" in log
    shown = chat.stdout + chat.stderr + status.stdout + status.stderr
    shown += refused.stdout + refused.stderr
    assert PASSWORD not in shown
    written = [p for p in home.root.rglob("*") if p.is_file() and "memory.git" not in p.parts]
    assert not [p for p in written if PASSWORD.encode() in p.read_bytes()]


def test_llm_proxy_is_refused_for_a_model_litellm_would_connect_around_it(
    home: Home, fake_llm: FakeOpenAI
) -> None:
    env = without_proxies(cli_env(home, fake_llm))
    env.pop("NANOMEM_LLM__API_BASE", None)
    env.update(
        NANOMEM_LLM__MODEL="anthropic/claude-sonnet-4-5",  # litellm translates its API
        NANOMEM_LLM__PROXY=f"http://me:{PASSWORD}@proxy.example.test:3128",
    )
    refused = run_cli("chat", "-m", "hi", env=env)
    socks4 = run_cli("chat", "-m", "hi", env={**env, "NANOMEM_LLM__PROXY": "socks4://p:1080"})
    assert refused.returncode == 2, refused.stderr
    assert "llm.proxy is the lean client's" in refused.stderr
    assert "llm.model = anthropic/claude-sonnet-4-5 goes through litellm" in refused.stderr
    assert "NANOMEM_LLM__PROXY" in refused.stderr and PASSWORD not in refused.stderr
    assert socks4.returncode == 2 and "llm.proxy" in socks4.stderr
    assert "a socks4:// proxy is not spoken by the lean client" in socks4.stderr
    assert fake_llm.requests == []
