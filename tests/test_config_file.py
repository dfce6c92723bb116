"""config.toml edited in place: values read by type, comments and blank lines kept, commented
defaults uncommented where they stand, nothing invalid written, secrets masked."""

import difflib
import stat
import tomllib
from pathlib import Path

import pytest

from nanomem.cli.main import CliError
from nanomem.config import ConfigError, load_settings
from nanomem.config_file import (
    changed_settings,
    parse_value,
    set_value,
    setting,
    shown,
    unset_value,
    with_value,
    without_value,
)
from nanomem.home import Home


def changed_lines(old: str, new: str) -> list[str]:
    """The lines removed and added, in order, without diff's headers."""
    diff = difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0)
    return [line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---")]


def set_in(text: str, key: str, raw: str) -> str:
    target = setting(key)
    return with_value(text, target.path, parse_value(target, raw))


@pytest.mark.parametrize(
    ("key", "raw", "line"),
    [
        ("telegram.enabled", "yes", "enabled = true"),
        ("telegram.allow_from", "4242,99", "allow_from = [4242, 99]"),
        ("telegram.owner", "4242", "owner = 4242"),
        ("tools.shell_limits.memory_mb", "512", "memory_mb = 512"),
        ("llm.timeout_s", "30", "timeout_s = 30"),
        ("llm.temperature", "0.2", "temperature = 0.2"),
        ("tools.shell_env", '["GOPATH"]', 'shell_env = ["GOPATH"]'),
        ("dream.review", "ask", 'review = "ask"'),
    ],
)
def test_a_commented_default_is_uncommented_in_place(
    home: Home, key: str, raw: str, line: str
) -> None:
    text = home.config.read_text()
    new = set_in(text, key, raw)
    (removed, added) = changed_lines(text, new)
    assert removed.startswith(f"-# {key.rsplit('.', 1)[-1]} = ") and added == f"+{line}"
    # Same place: every other line (comments, blank lines) stays where it was.
    assert len(new.splitlines()) == len(text.splitlines())
    assert new.count("[telegram]") == 1


@pytest.mark.parametrize(
    ("key", "raw"),
    [
        ("telegram.enabled", "true"),
        ("tools.shell_limits.cpu_s", "30"),
        ("gateway.port", "8080"),
        ("dream.review", "ask"),
    ],
)
def test_set_then_unset_gives_back_the_file_byte_for_byte(home: Home, key: str, raw: str) -> None:
    text = home.config.read_text()
    target = setting(key)
    assert without_value(set_in(text, key, raw), target.path, target.default) == text


def test_a_value_set_already_is_replaced_keeping_its_comment(tmp_path: Path) -> None:
    text = "# mine\n\n[llm]\n# how long\ntimeout_s = 60  # my note\n\n[agent]\n"
    new = set_in(text, "llm.timeout_s", "90")
    assert new == text.replace("timeout_s = 60", "timeout_s = 90")


def test_a_dotted_key_is_set_where_it_is_written() -> None:
    text = "[tools]\nweb.enabled = false\n"
    assert set_in(text, "tools.web.enabled", "on") == "[tools]\nweb.enabled = true\n"


def test_a_commented_table_becomes_the_table_where_it_stands(home: Home) -> None:
    text = home.config.read_text()
    new = set_in(text, "mcp.servers.files.command", "mcp-files")
    assert changed_lines(text, new) == [
        "-# [mcp.servers.files]                     # a local server, spoken to over stdio",
        '-# command = "npx"',
        "+[mcp.servers.files]                     # a local server, spoken to over stdio",
        '+command = "mcp-files"',
    ]
    assert tomllib.loads(new)["mcp"]["servers"] == {"files": {"command": "mcp-files"}}


def test_a_key_without_a_commented_default_goes_at_the_end_of_its_table() -> None:
    text = "[llm]\nmodel = 'a'\n\n# about agents\n[agent]\nmax_iterations = 3\n"
    new = set_in(text, "llm.api_base", "http://localhost:8000/v1")
    assert new == text.replace("'a'\n", "'a'\napi_base = \"http://localhost:8000/v1\"\n")


def test_a_missing_table_is_added_once_at_the_end() -> None:
    text = "[llm]\nmodel = 'a'\n"
    new = set_in(set_in(text, "telegram.enabled", "true"), "telegram.owner", "4242")
    assert new == text + "\n[telegram]\nenabled = true\nowner = 4242\n"


def test_unset_of_a_setting_without_default_removes_its_line() -> None:
    text = '[telegram]\n# the token\ntoken = "123:abc"\nenabled = true\n'
    target = setting("telegram.token")
    assert without_value(text, target.path, target.default) == (
        "[telegram]\n# the token\nenabled = true\n"
    )
    assert without_value("[llm]\n", target.path, None) == "[llm]\n"  # nothing to unset


@pytest.mark.parametrize(
    ("key", "raw", "value"),
    [
        ("telegram.enabled", "off", False),
        ("telegram.enabled", "YES", True),
        ("llm.supports_images", "no", False),
        ("telegram.allow_from", "[4242]", [4242]),
        ("telegram.allow_from", "4242, 99", [4242, 99]),
        ("telegram.allow_from", '["*"]', ["*"]),
        ("api.keys", "one-long-key-0123456789", ["one-long-key-0123456789"]),
        ("mcp.servers.files.env", '{TOKEN = "x"}', {"TOKEN": "x"}),
        ("mcp.servers.files.env", '{"TOKEN": "x"}', {"TOKEN": "x"}),
        ("llm.model", "openai/gpt-4o-mini", "openai/gpt-4o-mini"),
        ("llm.model", " spaced ", " spaced "),  # a text as given
    ],
)
def test_values_are_read_by_the_settings_type(key: str, raw: str, value: object) -> None:
    assert parse_value(setting(key), raw) == value


@pytest.mark.parametrize(
    ("key", "raw", "says"),
    [
        ("telegram.enabled", "maybe", "telegram.enabled is true or false"),
        ("telegram.owner", "me", "telegram.owner takes a number (a whole one)"),
        ("telegram.allow_from", "[77", "telegram.allow_from takes a list: a JSON list"),
        ("telegram", "x", "telegram is a table: set one of its keys (telegram.enabled"),
        # Not "cannot be changed in place" (nan equals nothing, so the check after failed).
        ("llm.timeout_s", "nan", "llm.timeout_s takes a number"),
        ("llm.timeout_s", "inf", "llm.timeout_s takes a number"),
    ],
)
def test_a_value_of_the_wrong_kind_is_refused(key: str, raw: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_value(setting(key), raw)
    assert says in str(err.value) and raw not in str(err.value)  # it may be a misplaced key


@pytest.mark.parametrize(
    ("key", "suggested"),
    [
        ("llm.api_bse", "did you mean llm.api_base or"),
        ("api_bse", "did you mean llm.api_base or voice.api_base or slack.api_base?"),
        ("telegram.tokn", "did you mean telegram.token"),
        ("mcp.servers.files.comand", "did you mean mcp.servers.files.command"),
        ("lm.model", "did you mean llm.model"),
    ],
)
def test_an_unknown_key_names_the_closest_known_keys(key: str, suggested: str) -> None:
    with pytest.raises(ConfigError) as err:
        setting(key)
    assert f"{key} is not a setting; {suggested}" in str(err.value)


def test_an_invalid_value_leaves_the_file_byte_identical(home: Home) -> None:
    before = home.config.read_bytes()
    for key, value in (("api.keys", ["too-short"]), ("llm.context_window_tokens", 1024)):
        with pytest.raises(ConfigError) as err:
            set_value(home.config, home.lock("config"), setting(key), value)
        assert str(home.config) in str(err.value) and "too-short" not in str(err.value)
    assert home.config.read_bytes() == before
    assert [p.name for p in home.root.iterdir() if p.name.startswith(".config")] == []


def test_a_change_is_written_private_and_loads(home: Home) -> None:
    home.config.chmod(0o644)
    assert set_value(home.config, home.lock("config"), setting("telegram.owner"), 4242)
    assert stat.S_IMODE(home.config.stat().st_mode) == 0o600
    assert load_settings(home.config).telegram.owner == 4242
    # The same value again changes nothing.
    assert not set_value(home.config, home.lock("config"), setting("telegram.owner"), 4242)
    assert unset_value(home.config, home.lock("config"), setting("telegram.owner"))
    assert load_settings(home.config).telegram.owner is None


def test_a_file_with_a_table_twice_is_not_edited(home: Home) -> None:
    text = home.config.read_text() + "\n[telegram]\nenabled = true\n"
    home.config.write_text(text)
    with pytest.raises(ConfigError) as err:
        set_value(home.config, home.lock("config"), setting("telegram.owner"), 4242)
    assert "declares [telegram] twice" in str(err.value)
    assert home.config.read_text() == text


@pytest.mark.parametrize(
    ("key", "value", "masked"),
    [
        ("telegram.token", "123456:ABCdefGHIjklMNOpqr", "***Opqr"),
        ("llm.api_key", "sk-0123456789abcdefwxyz", "***wxyz"),
        ("tools.web.brave_api_key", "short", "***"),  # too short to show any of it
        ("api.keys", ["key-0123456789abcdef1234"], "[***1234]"),
        ("mcp.servers.files.env", {"TOKEN": "secret-0123456789abcd"}, "{TOKEN = ***abcd}"),
        ("llm.proxy", "http://me:hunter2@proxy:3128", '"http://me:***@proxy:3128"'),
    ],
)
def test_secrets_are_masked_unless_asked(key: str, value: object, masked: str) -> None:
    target = setting(key)
    assert shown(target, value) == masked
    assert "***" not in shown(target, value, reveal=True)


def test_plain_values_are_shown_as_toml() -> None:
    assert shown(setting("telegram.enabled"), True) == "true"
    assert shown(setting("telegram.allow_from"), [4242, "*"]) == '[4242, "*"]'
    assert shown(setting("llm.model"), "openai/x") == '"openai/x"'
    assert shown(setting("llm.api_base"), None) == "(not set)"


def test_unset_of_a_table_comments_it_out_and_drops_its_secrets(home: Home) -> None:
    text = home.config.read_text()
    for key, raw in (
        ("mcp.servers.files.command", "mcp-files"),
        ("mcp.servers.files.env", '{TOKEN = "secret-0123456789abcd"}'),
    ):
        text = set_in(text, key, raw)
    target = setting("mcp.servers.files")
    new = without_value(text, target.path, target.default)
    assert "secret-0123456789abcd" not in new
    assert tomllib.loads(new)["mcp"].get("servers", {}) == {}
    assert "# [mcp.servers.files]" in new and '# command = "mcp-files"' in new
    assert new.count("\n") == text.count("\n") - 1  # only the secret's line is gone


def test_the_settings_an_edit_changed_are_named() -> None:
    old = '[llm]\nmodel = "a"\n[telegram]\nenabled = false\n'
    new = '[llm]\nmodel = "b"\n[telegram]\nenabled = false\nowner = 5\n[mcp.servers.x]\nurl = "u"\n'
    keys = [target.key for target in changed_settings(old, new)]
    assert keys == ["llm.model", "telegram.owner", "mcp.servers.x.url"]
    assert changed_settings("[llm", new) == []


def test_onboardings_writer_places_a_value_as_config_set_does(home: Home) -> None:
    from nanomem.cli.onboard import set_config_values

    text = home.config.read_text()
    set_config_values(home.config, "telegram", {"token": "123:abc"}, home.lock("config"))
    assert changed_lines(text, home.config.read_text()) == ['-# token = ""', '+token = "123:abc"']
    # A layout that cannot take it in place is left as it was, and said.
    home.config.write_text('telegram = "not a table"\n')
    with pytest.raises(CliError, match="cannot be changed in place"):
        set_config_values(home.config, "telegram", {"enabled": True}, home.lock("config"))
    assert home.config.read_text() == 'telegram = "not a table"\n'
