from pathlib import Path

from loguru import logger

from nanomem.log import redact, register_environment_secrets, register_secrets, setup_logging


def test_registered_secrets_are_masked_in_messages_and_tracebacks(tmp_path: Path) -> None:
    secret = "sk-unit-test-secret-999"
    register_secrets([secret, None, ""])
    setup_logging("DEBUG", tmp_path)
    logger.info("calling with key {}", secret)
    try:
        raise RuntimeError(f"provider said: bad key {secret}")
    except RuntimeError:
        logger.exception("failed")
    logger.complete()
    text = (tmp_path / "nanomem.log").read_text()
    assert "calling with key ***" in text
    assert "RuntimeError: provider said: bad key ***" in text
    assert secret not in text


def test_stdlib_loggers_are_routed_and_masked(tmp_path: Path) -> None:
    import logging

    secret = "123456:telegram-bot-token-abc"
    register_secrets([secret])
    setup_logging("DEBUG", tmp_path)
    logging.getLogger("httpx").warning("POST https://api.telegram.org/bot%s/getMe", secret)
    text = (tmp_path / "nanomem.log").read_text()
    assert "/bot***/getMe" in text and secret not in text


def test_a_proxy_urls_password_is_a_secret() -> None:
    register_environment_secrets({"HTTPS_PROXY": "http://me:pr%40xy-pw-77@proxy.corp:3128"})
    register_environment_secrets({"http_proxy": "you:other-pw-88@proxy.corp:3128"})  # no scheme
    register_environment_secrets({"ALL_PROXY": "http://[bad"})  # unreadable: no error
    shown = redact("HTTPS_PROXY=http://me:pr%40xy-pw-77@proxy.corp:3128 pr@xy-pw-77 other-pw-88")
    assert shown == "HTTPS_PROXY=http://me:***@proxy.corp:3128 *** ***"


def test_the_telegram_proxys_password_is_a_configured_secret() -> None:
    from nanomem.config import Settings
    from nanomem.text.masking import configured_secrets

    settings = Settings(telegram={"proxy": "socks5://bot:tg%2Fproxy-pw-66@proxy.corp:1080"})
    register_secrets(configured_secrets(settings))
    shown = redact("proxy socks5://bot:tg%2Fproxy-pw-66@proxy.corp:1080 refused tg/proxy-pw-66")
    assert shown == "proxy socks5://bot:***@proxy.corp:1080 refused ***"
    assert configured_secrets(Settings(telegram={"proxy": "http://proxy.corp:3128"})) == []
