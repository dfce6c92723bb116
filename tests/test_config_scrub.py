"""config.toml without its secrets (what `nanomem export` archives): every secret setting, in
whatever shape the file holds it, found by its type; the rest kept line for line."""

from __future__ import annotations

import tomllib

import pytest

from nanomem.agent import Templates
from nanomem.config import Settings
from nanomem.config_scrub import ScrubError, scrub_config
from nanomem.text.masking import configured_secrets, is_secret_setting

HOSTILE_SHAPES = """\
# my settings
voice.api_key = "sk-dotted-from-the-root-0123456789"

[llm]
api_key = "sk-plain-0123456789"
model = "openai/gpt-4o-mini"   # kept
proxy = "http://me:proxy-password-0123@proxy.example:8080"

[telegram]
token = '''123456:multi-line-literal
-token-abcdef'''
allow_from = [42]

[api]
keys = [
    "first-agent-api-key-0123456789abcdef",  # a comment inside
    "second-agent-api-key-0123456789abcdef",
]

[tools.web]
"brave_api_key" = "brave-quoted-key-0123456789"

[mcp.servers."files.local"]
command = "npx"
env = { GITHUB_TOKEN = "ghp_inline_token_0123456789", LEVEL = "debug" }

[mcp.servers.tracker]
url = "https://tracker.example/mcp"

[mcp.servers.tracker.headers]
Authorization = "Bearer tracker-token-0123456789"
"""
SECRETS = (
    "sk-plain-0123456789",
    "sk-dotted-from-the-root-0123456789",
    "proxy-password-0123",
    "multi-line-literal",
    "first-agent-api-key",
    "second-agent-api-key",
    "brave-quoted-key-0123456789",
    "ghp_inline_token_0123456789",
    "tracker-token-0123456789",
)


def test_every_shape_of_secret_goes_and_everything_else_stays() -> None:
    scrubbed = scrub_config(HOSTILE_SHAPES)
    for secret in SECRETS:
        assert secret not in scrubbed.text
    assert scrubbed.removed == [
        "voice.api_key",
        "llm.api_key",
        "llm.proxy",
        "telegram.token",
        "api.keys",
        "tools.web.brave_api_key",
        "mcp.servers.files.local.env",
        "mcp.servers.tracker.headers.Authorization",
    ]
    kept = tomllib.loads(scrubbed.text)
    assert kept["llm"] == {"model": "openai/gpt-4o-mini"}
    assert kept["telegram"] == {"allow_from": [42]}
    assert kept["mcp"]["servers"]["files.local"] == {"command": "npx"}
    assert kept["mcp"]["servers"]["tracker"] == {
        "url": "https://tracker.example/mcp",
        "headers": {},
    }
    assert scrubbed.text.startswith(
        "# my settings\n# voice.api_key = … (left out by nanomem export)\n"
    )
    assert 'model = "openai/gpt-4o-mini"   # kept\n' in scrubbed.text
    assert '\n# "brave_api_key" = … (left out by nanomem export)\n' in scrubbed.text
    assert "\n# env = … (left out by nanomem export)\n" in scrubbed.text


def test_a_proxy_without_a_password_and_ordinary_settings_are_kept() -> None:
    text = '[llm]\nproxy = "http://proxy.example:8080"\nmodel = "x"\n'
    assert scrub_config(text).text == text
    assert scrub_config(text).removed == []


def test_the_onboarded_file_keeps_its_comments(tmp_path: object) -> None:
    text = Templates().render(
        "config.toml.j2", model="openai/x", api_key="sk-onboarded-0123456789", api_base=""
    )
    scrubbed = scrub_config(text, drop=(("agent", "workspace"),))
    assert scrubbed.removed == ["llm.api_key"]
    assert "sk-onboarded-0123456789" not in scrubbed.text
    assert len(scrubbed.text.splitlines()) == len(text.splitlines())
    assert [line for line in scrubbed.text.splitlines() if line.startswith("#")] != []


def test_a_file_that_is_not_toml_is_refused_rather_than_guessed() -> None:
    with pytest.raises(ScrubError):
        scrub_config('[llm]\napi_key = "sk-unterminated\n')


def test_a_requested_setting_is_dropped_and_named_apart_from_secrets() -> None:
    scrubbed = scrub_config(
        '[agent]\nworkspace = "/srv/ws"\nmax_iterations = 9\n', drop=(("agent", "workspace"),)
    )
    assert scrubbed.dropped == ["agent.workspace"] and scrubbed.removed == []
    assert tomllib.loads(scrubbed.text) == {"agent": {"max_iterations": 9}}


@pytest.mark.parametrize(
    ("path", "secret"),
    [
        ("llm.api_key", True),
        ("api.keys", True),
        ("api.keys.0", True),
        ("mcp.servers.any-name.env.TOKEN", True),
        ("mcp.servers.any-name.headers", True),
        ("voice.api_key", True),
        ("llm.model", False),
        ("mcp.servers.any-name.command", False),
        ("telegram.allow_from", False),
        ("no.such.setting", False),
    ],
)
def test_secret_settings_are_known_by_their_type(path: str, secret: bool) -> None:
    assert is_secret_setting(tuple(path.split("."))) is secret


def test_masking_finds_the_same_secrets_by_their_type() -> None:
    settings = Settings.model_validate(
        {
            "llm": {"api_key": "llm-key-0123456789", "proxy": "http://u:proxy-pw-123@h:1"},
            "telegram": {"token": "bot-token-0123456789"},
            "api": {"keys": ["agent-key-0123456789abcdef"]},
            "tools": {
                "web": {"brave_api_key": "brave-0123456789", "tavily_api_key": "tav-0123456789"}
            },
            "voice": {"api_key": "voice-0123456789"},
            "mcp": {
                "servers": {
                    "t": {
                        "url": "https://t.example/mcp",
                        "headers": {"Authorization": "Bearer hdr-0123456789"},
                    }
                }
            },
        }
    )
    assert sorted(configured_secrets(settings)) == sorted(
        [
            "llm-key-0123456789",
            "bot-token-0123456789",
            "agent-key-0123456789abcdef",
            "brave-0123456789",
            "tav-0123456789",
            "voice-0123456789",
            "Bearer hdr-0123456789",
            "hdr-0123456789",
            "proxy-pw-123",
            "proxy-pw-123",
        ]
    )


INLINE_TABLES = """\
llm = { model = "openai/gpt-4o-mini", api_key = "sk-inline-root-0123456789" }

[mcp]
servers = { gh = { command = "gh-mcp", env = { GITHUB_TOKEN = "ghp_inline_deep_0123456789" } } }

[telegram]
enabled = true
"""


def test_secrets_inside_an_inline_table_go_and_its_other_settings_stay() -> None:
    # The table's own key (`llm`, `mcp.servers`) is no secret; what it holds inline is.
    scrubbed = scrub_config(INLINE_TABLES)
    assert "sk-inline-root" not in scrubbed.text
    assert "ghp_inline_deep" not in scrubbed.text
    assert scrubbed.removed == ["llm.api_key", "mcp.servers.gh.env"]
    kept = tomllib.loads(scrubbed.text)
    assert kept["llm"] == {"model": "openai/gpt-4o-mini"}
    assert kept["mcp"]["servers"]["gh"] == {"command": "gh-mcp"}
    assert kept["telegram"] == {"enabled": True}
    assert "\n# llm.api_key = … (left out by nanomem export)\n" in scrubbed.text
    assert "\n# servers.gh.env = … (left out by nanomem export)\n" in scrubbed.text


def test_a_dropped_setting_inside_an_inline_table_goes_too() -> None:
    scrubbed = scrub_config(
        'agent = { workspace = "/srv/ws", max_iterations = 9 }\n', drop=(("agent", "workspace"),)
    )
    assert scrubbed.dropped == ["agent.workspace"] and scrubbed.removed == []
    assert tomllib.loads(scrubbed.text) == {"agent": {"max_iterations": 9}}
