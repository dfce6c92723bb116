from pathlib import Path

import pytest

from nanomem.config import ConfigError, load_settings


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_when_no_file(tmp_path: Path) -> None:
    settings = load_settings(tmp_path / "missing.toml")
    assert settings.llm.model == ""
    assert settings.tools.restrict_to_workspace is True
    assert settings.tools.shell_enabled is False
    assert settings.agent.max_iterations == 20


def test_precedence_cli_over_env_over_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = write(tmp_path / "c.toml", '[llm]\nmodel = "file/m"\ntimeout_s = 5\nmax_tokens = 9\n')
    monkeypatch.setenv("NANOMEM_LLM__MODEL", "env/m")
    monkeypatch.setenv("NANOMEM_LLM__TIMEOUT_S", "7")
    settings = load_settings(config, {"llm": {"model": "cli/m"}})
    assert settings.llm.model == "cli/m"
    assert settings.llm.timeout_s == 7
    assert settings.llm.max_tokens == 9


def test_api_key_is_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NANOMEM_LLM__API_KEY", "sk-abcdef123456")
    settings = load_settings(tmp_path / "none.toml")
    assert settings.llm.api_key is not None
    assert "sk-abcdef123456" not in repr(settings)
    assert settings.llm.api_key.get_secret_value() == "sk-abcdef123456"


def test_malformed_toml_names_file_and_line(tmp_path: Path) -> None:
    config = write(tmp_path / "c.toml", '[llm]\nmodel = "ok"\ntimeout_s = = 3\n')
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    assert str(config) in str(err.value)
    assert "line 3" in str(err.value)


def test_unknown_key_in_file_names_key_and_line(tmp_path: Path) -> None:
    config = write(tmp_path / "c.toml", '[llm]\nmodel = "ok"\n\n[agent]\nmax_iteratons = 3\n')
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    message = str(err.value)
    assert "agent.max_iteratons" in message
    assert "unknown setting" in message
    assert f"{config}, line 5" in message


def test_wrong_type_in_env_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NANOMEM_LLM__TIMEOUT_S", "soon")
    with pytest.raises(ConfigError) as err:
        load_settings(tmp_path / "none.toml")
    message = str(err.value)
    assert "llm.timeout_s" in message and "soon" not in message
    assert "environment variable NANOMEM_LLM__TIMEOUT_S" in message


def test_a_list_in_env_that_is_not_json_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NANOMEM_TOOLS__WEB__ALLOW_NETWORKS", "10.0.0.0/8 fd00::/8")  # not JSON
    with pytest.raises(ConfigError) as err:
        load_settings(tmp_path / "none.toml")
    assert "tools.web.allow_networks: Input should be a valid list" in str(err.value)
    assert "environment variable NANOMEM_TOOLS__WEB__ALLOW_NETWORKS" in str(err.value)


def test_env_reaches_nested_tables_key_by_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write(tmp_path / "c.toml", "[tools.web]\nmax_bytes = 50000\ntimeout_s = 9\n")
    monkeypatch.setenv("nanomem_tools__web", '{"max_bytes": 60000, "enabled": false}')
    monkeypatch.setenv("NANOMEM_TOOLS__WEB__MAX_BYTES", "70000")  # the more precise one wins
    monkeypatch.setenv("NANOMEM_MCP__SERVERS__FILES__COMMAND", "mcp-files")
    monkeypatch.setenv("NANOMEM_MCP__SERVERS__FILES__ARGS", '["--root", "/srv"]')
    monkeypatch.setenv("NANOMEM_HOME", str(tmp_path))  # no setting: ignored
    settings = load_settings(config)
    web = settings.tools.web
    assert (web.max_bytes, web.timeout_s, web.enabled) == (70000, 9, False)
    assert settings.mcp.servers["files"].args == ["--root", "/srv"]


def test_dotted_keys_are_located(tmp_path: Path) -> None:
    config = write(tmp_path / "c.toml", "llm.max_tokens = -1\n")
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    assert f"{config}, line 1" in str(err.value)


def test_bad_secret_value_is_not_echoed(tmp_path: Path) -> None:
    config = write(tmp_path / "c.toml", "[llm]\napi_key = 12345678\n")
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    assert "12345678" not in str(err.value)
    assert "llm.api_key" in str(err.value)


@pytest.mark.parametrize(
    "text",
    [
        '[llm]\napikey = "sk-live-0123456789abcdef"\n',
        '[telegram]\nBOT_TOKEN = "sk-live-0123456789abcdef"\n',
        '[llm]\napi_key = ["sk-live-0123456789abcdef"]\n',
    ],
)
def test_no_config_error_echoes_a_value(tmp_path: Path, text: str) -> None:
    config = write(tmp_path / "c.toml", text)
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    assert "sk-live" not in str(err.value) and f"{config}, line 2" in str(err.value)


def test_out_of_range_cli_value(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(tmp_path / "none.toml", {"agent": {"max_iterations": 0}})
    assert "agent.max_iterations" in str(err.value) and "command line" in str(err.value)


def test_telegram_allow_from_takes_numeric_ids_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NANOMEM_TELEGRAM__ALLOW_FROM", '[123456, "789"]')
    assert load_settings(tmp_path / "none.toml").telegram.allow_from == [123456, 789]
    monkeypatch.setenv("NANOMEM_TELEGRAM__ALLOW_FROM", '["@alice"]')
    with pytest.raises(ConfigError) as err:
        load_settings(tmp_path / "none.toml")
    assert "telegram.allow_from" in str(err.value) and "numeric Telegram user id" in str(err.value)


def test_telegram_is_off_and_closed_by_default(tmp_path: Path) -> None:
    telegram = load_settings(tmp_path / "none.toml").telegram
    assert telegram.enabled is False and telegram.allow_from == [] and telegram.token is None


def test_consolidation_target_must_be_below_trigger(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(
            tmp_path / "none.toml", {"memory": {"consolidate_at": 0.5, "consolidate_to": 0.6}}
        )
    assert "consolidate_to must be smaller" in str(err.value)


def test_a_window_the_reply_fills_is_refused_with_both_keys_and_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write(tmp_path / "c.toml", "[llm]\nmodel = 'openai/x'\ncontext_window_tokens = 4096\n")
    with pytest.raises(ConfigError) as refused:
        load_settings(config)
    message = str(refused.value)
    assert f"llm.context_window_tokens (4096, {config}, line 3)" in message
    assert "llm.max_tokens (4096, default)" in message
    assert "at least 6467 tokens" in message
    monkeypatch.setenv("NANOMEM_LLM__MAX_TOKENS", "6000")
    with pytest.raises(ConfigError, match="environment variable NANOMEM_LLM__MAX_TOKENS"):
        load_settings(config)
    monkeypatch.setenv("NANOMEM_LLM__MAX_TOKENS", "1024")  # room enough: accepted
    assert load_settings(config).llm.max_tokens == 1024


def test_telegram_owner_is_a_positive_user_id_and_else_the_first_allowed_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NANOMEM_TELEGRAM__ALLOW_FROM", "[-100555, 43, 42]")
    telegram = load_settings(tmp_path / "none.toml").telegram
    assert (telegram.owner_id, telegram.assumed_owner) == (43, 43)  # as before the setting
    monkeypatch.setenv("NANOMEM_TELEGRAM__OWNER", "42")
    telegram = load_settings(tmp_path / "none.toml").telegram
    assert (telegram.owner_id, telegram.assumed_owner) == (42, None)
    for bad in ("-42", "0", "@alice", "true"):
        monkeypatch.setenv("NANOMEM_TELEGRAM__OWNER", bad)
        with pytest.raises(ConfigError) as err:
            load_settings(tmp_path / "none.toml")
        assert "NANOMEM_TELEGRAM__OWNER" in str(err.value) or "telegram.owner" in str(err.value)


@pytest.mark.parametrize(
    "base", ["http://[::1/v1", "http://localhost:99999/v1", "localhost:8000/v1", "ftp://h/v1"]
)
def test_an_api_base_no_client_can_use_is_a_config_error(tmp_path: Path, base: str) -> None:
    config = write(tmp_path / "c.toml", f'[llm]\napi_base = "{base}"\n')
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    assert "llm.api_base" in str(err.value) and "e.g. http://localhost:8000/v1" in str(err.value)
    good = write(tmp_path / "g.toml", '[llm]\napi_base = " http://[::1]:8000/v1 "\n')
    assert load_settings(good).llm.api_base == "http://[::1]:8000/v1"


def test_a_table_declared_twice_names_both_lines_and_the_fix(tmp_path: Path) -> None:
    # README's snippet pasted below the section onboarding wrote (issue 31, slip 2).
    config = write(
        tmp_path / "c.toml",
        '[telegram]\n# enabled = false\n\n[llm]\nmodel = "m"\n\n'
        '[telegram]\nenabled = true\ntoken = "123:secret-token-value"\n',
    )
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    assert str(err.value) == (
        f"config error: {config} declares [telegram] twice (lines 1 and 7): merge them into "
        "one, or use `nanomem config set telegram.enabled true`"
    )


def test_a_table_declared_twice_never_shows_a_secret_as_the_example(tmp_path: Path) -> None:
    config = write(tmp_path / "c.toml", '[api]\n\n[api]\nkeys = ["sk-live-0123456789abcdef"]\n')
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    assert "(lines 1 and 3)" in str(err.value) and "sk-live" not in str(err.value)
    assert "`nanomem config set api.keys VALUE`" in str(err.value)


def test_a_key_set_twice_names_both_lines(tmp_path: Path) -> None:
    config = write(tmp_path / "c.toml", '[llm]\nmodel = "a"\n# model = "b"\nmodel = "c"\n')
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    assert f"{config} sets llm.model twice (lines 2 and 4)" in str(err.value)


def test_an_unknown_table_names_its_line_and_the_closest_name(tmp_path: Path) -> None:
    config = write(tmp_path / "c.toml", '# mine\n[lm]\nmodel = "openai/x"\n')
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    assert str(err.value) == (
        f"config error: [lm]: unknown setting ({config}, line 2); did you mean [llm]?"
    )


def test_a_mistyped_key_suggests_the_closest(tmp_path: Path) -> None:
    config = write(tmp_path / "c.toml", '[llm]\napi_bse = "http://localhost:8000/v1"\n')
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    assert str(err.value) == (
        f"config error: llm.api_bse: unknown setting ({config}, line 2); did you mean llm.api_base?"
    )


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("NANOMEM_TELEGRAM__ALLOW_FROM", "4242,99", [4242, 99]),
        ("NANOMEM_TELEGRAM__ALLOW_FROM", "4242", [4242]),
        ("NANOMEM_TELEGRAM__ALLOW_FROM", " 4242 , 99 ", [4242, 99]),
        ("NANOMEM_TELEGRAM__ALLOW_FROM", "[4242, 99]", [4242, 99]),
        ("NANOMEM_TELEGRAM__ALLOW_FROM", "", []),  # a compose file's empty variable
        ("NANOMEM_TOOLS__SHELL_ENV", "GOPATH,CARGO_HOME", ["GOPATH", "CARGO_HOME"]),
    ],
)
def test_a_list_in_env_may_be_comma_separated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: list[object]
) -> None:
    monkeypatch.setenv(name, value)
    settings = load_settings(tmp_path / "none.toml")
    section, key = name.removeprefix("NANOMEM_").lower().split("__")
    assert getattr(getattr(settings, section), key) == expected


def test_one_key_without_brackets_is_a_list_of_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NANOMEM_API__KEYS", "one-long-key-0123456789abcdef")
    settings = load_settings(tmp_path / "none.toml")
    assert [k.get_secret_value() for k in settings.api.keys] == ["one-long-key-0123456789abcdef"]


@pytest.mark.parametrize("value", ["[4242", "4242,,99", "4242 99"])
def test_a_list_variable_that_cannot_be_read_says_how_to_write_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("NANOMEM_TELEGRAM__ALLOW_FROM", value)
    with pytest.raises(ConfigError) as err:
        load_settings(tmp_path / "none.toml")
    assert str(err.value) == (
        "config error: telegram.allow_from: Input should be a valid list (environment "
        "variable NANOMEM_TELEGRAM__ALLOW_FROM): write a JSON list such as '[4242, 99]', or "
        "comma-separated: 4242,99"
    )
