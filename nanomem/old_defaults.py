"""Configs that `nanomem onboard` wrote with every default as a value, before it wrote unchosen
settings as comments: such a file never chose those values, so today's defaults apply.

Without this, `transport = "litellm"` from an old onboarding would pin every existing home to
the slow path forever. A file that differs from those defaults in anything but the settings a
person fills in (model, key, api_base, the Telegram bot) is a person's own and kept as is.
"""

from __future__ import annotations

from typing import Any

# Every value the onboarding template held as of commit 40baab3 (llm.transport = "litellm").
OLD_ONBOARDING: dict[str, dict[str, Any]] = {
    "llm": {
        "timeout_s": 120,
        "max_retries": 3,
        "max_tokens": 4096,
        "context_window_tokens": 65536,
        "transport": "litellm",
    },
    "agent": {"max_iterations": 20, "max_concurrent_turns": 16, "max_message_chars": 32000},
    "tools": {
        "restrict_to_workspace": True,
        "shell_enabled": False,
        "shell_timeout_s": 60,
        "max_output_chars": 16000,
    },
    "memory": {
        "consolidate_at": 0.6,
        "consolidate_to": 0.4,
        "keep_recent_turns": 4,
        "max_rounds": 4,
        "history_share": 0.1,
    },
    "dream": {
        "enabled": True,
        "interval_h": 2,
        "trigger_entries": 40,
        "max_batch_size": 20,
        "max_iterations": 10,
        "max_tokens": 200000,
        "max_wall_s": 300,
        "max_delete_share": 0.25,
    },
    "telegram": {
        "base_url": "https://api.telegram.org/bot",
        "base_file_url": "https://api.telegram.org/file/bot",
        "group_policy": "mention",
        "max_file_mb": 20,
    },
    "gateway": {"host": "127.0.0.1", "port": 18790, "grace_s": 30},
    "log": {"level": "INFO"},
}
# Added to the template later with the same write-every-default habit; present or not.
LATER_ADDITIONS: dict[str, dict[str, Any]] = {
    "llm": {"stream": True},
    "tools": {"shell_env": []},
    "memory": {"groups_see_personal": False},
}
# What a person fills in after onboarding; it says nothing about the defaults.
PERSONAL: dict[str, frozenset[str]] = {
    "llm": frozenset({"model", "api_key", "api_base"}),
    "telegram": frozenset({"enabled", "token", "allow_from", "proxy"}),
}
NOTE = (
    "config.toml holds exactly the defaults `nanomem onboard` used to write as values "
    '(llm.transport = "litellm" among them); they are treated as not chosen, so today\'s '
    'defaults apply (llm.transport = "auto"). Set any of them differently to keep a choice.'
)


def without_old_defaults(data: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """`data` (a parsed config.toml) minus the old onboarding defaults when it holds exactly
    them, and whether it did."""
    if not _holds_old_defaults(data):
        return data, False
    kept: dict[str, Any] = {}
    for section, values in data.items():
        personal = PERSONAL.get(section, frozenset())
        kept[section] = {k: v for k, v in values.items() if k in personal}
    return kept, True


def _holds_old_defaults(data: dict[str, Any]) -> bool:
    if set(data) != set(OLD_ONBOARDING):
        return False
    for section, old in OLD_ONBOARDING.items():
        values = data[section]
        if not isinstance(values, dict):
            return False
        later = LATER_ADDITIONS.get(section, {})
        personal = PERSONAL.get(section, frozenset())
        for key, value in values.items():
            if key in personal:
                continue
            expected = old.get(key, later.get(key, _MISSING))
            # Compare types too: 1 == True in Python, but `enabled = 1` is no onboarding default.
            if type(value) is not type(expected) or value != expected:
                return False
        if not set(old) <= set(values):
            return False
    return True


_MISSING = object()
