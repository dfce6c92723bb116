"""The web app's token in the config file: made where the web app is on without one, never
printed where a log may keep it, never over a token set elsewhere; onboarding's offer."""

from __future__ import annotations

import tomllib

import pytest

from nanomem.cli.web_setup import ensure_web_token
from nanomem.config import load_settings
from nanomem.home import Home


def web_table(home: Home) -> dict[str, object]:
    return dict(tomllib.loads(home.config.read_text()).get("web", {}))


def refuse(question: str) -> str:
    raise AssertionError(f"asked {question!r}")


def test_an_enabled_web_app_gets_a_token_said_without_it(
    home: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = load_settings(home.config, {"web": {"enabled": True}})
    assert ensure_web_token(settings, home.config, home, ask=refuse)
    token = str(web_table(home)["token"])
    err = capsys.readouterr().err
    assert "stored as web.token" in err and token not in err
    again = load_settings(home.config, {"web": {"enabled": True}})
    assert not ensure_web_token(again, home.config, home, ask=refuse)
    assert web_table(home)["token"] == token


def test_off_nothing_is_made_unless_onboarding_is_told_yes(home: Home) -> None:
    settings = load_settings(home.config)
    assert not ensure_web_token(settings, home.config, home, ask=refuse)
    assert not ensure_web_token(settings, home.config, home, offer=True, ask=lambda _: "n")
    assert web_table(home) == {}

    def ctrl_d(_: str) -> str:
        raise EOFError

    assert not ensure_web_token(settings, home.config, home, offer=True, ask=ctrl_d)
    assert ensure_web_token(settings, home.config, home, offer=True, ask=lambda _: "y")
    table = web_table(home)
    assert table["enabled"] is True and len(str(table["token"])) >= 40


def test_a_token_set_elsewhere_is_not_shadowed_by_a_new_one(home: Home) -> None:
    settings = load_settings(home.config, {"web": {"token": "a-token-from-the-environment"}})
    assert ensure_web_token(settings, home.config, home, offer=True, ask=lambda _: "yes")
    assert web_table(home) == {"enabled": True}


def test_an_empty_variable_says_why_no_token_is_made(
    home: Home, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NANOMEM_WEB__TOKEN", "")
    settings = load_settings(home.config, {"web": {"enabled": True}})
    assert not ensure_web_token(settings, home.config, home)
    assert "NANOMEM_WEB__TOKEN is empty" in capsys.readouterr().err
    assert "token" not in web_table(home)
