"""Every prompt is a template; each renders with a sample context, and a workspace can override."""

from datetime import UTC, datetime
from pathlib import Path
from typing import get_args

import jinja2
import pytest
from jinja2 import UndefinedError
from pydantic import BaseModel

from nanomem.agent.bus import InboundMessage
from nanomem.agent.context import ContextBuilder
from nanomem.agent.skills import Skill, Skills
from nanomem.agent.templates import Templates, bundled_dir
from nanomem.memory.history import HistoryEntry, HistoryStore, NewEntry
from nanomem.providers.provider import ErrorCategory
from tests.conftest import log_lines

SAMPLES = {
    "system.md.j2": {
        "shared_room": True,
        "workspace": "/ws",
        "files": {"soul": "be kind", "user": "Ada", "agents": "rules", "memory": "facts"},
        "skills": [Skill("remember", "how to remember", Path("/ws/skills/remember/SKILL.md"))],
        "tools": ["read_file", "edit_file", "exec", "search_history"],
        "history": [
            HistoryEntry(7, "2026-11-20T10:00:00+01:00", "cli:direct", "- Ada likes tea", "summary")
        ],
        "sections": ["A feature's own part of the prompt."],
    },
    "recall.md.j2": {"shared_room": True},
    "untrusted.md.j2": {},
    "voice_heard.md.j2": {},
    "dream_system.md.j2": {},
    "dream_analyse.md.j2": {
        "entries": [HistoryEntry(3, "2026-11-20T10:00:00+01:00", "cli:direct", "- Ada", "summary")],
        "files": {"SOUL.md": "# Soul", "USER.md": "", "memory/MEMORY.md": "# Memory"},
    },
    "dream_rejected.md.j2": {
        "rejections": [
            {"at": "2026-11-22T10:00", "reason": "not true", "lines": ["+- Lives in Quito"]}
        ]
    },
    "dream_edit.md.j2": {
        "analysis": "NEW: USER.md: name is Ada",
        "files": {"SOUL.md": "# Soul", "USER.md": "", "memory/MEMORY.md": "# Memory"},
    },
    "consolidate.md.j2": {"first": "2026-11-01", "last": "2026-11-20", "today": "2026-11-22"},
    "runtime_context.md.j2": {
        "time": "2026-11-22 10:00:00 CET (UTC+0100)",
        "weekday": "Sunday",
        "channel": "telegram",
        "chat_id": "42",
        "sender": "Ada",
        "media": ["media/photo.jpg"],
    },
    "help.md.j2": {"commands": []},
    "provider_error.md.j2": {
        "category": "auth",
        "model": "openai/x",
        "key_source": "X",
        "url": "https://api.openai.com/v1",
        "log": "~/.nanomem/logs/nanomem.log",
    },
    "iteration_limit.md.j2": {"max_iterations": 20},
    "turn_failed.md.j2": {"category": "unreachable"},
    "client_instructions.md.j2": {
        "instructions": ["Answer in French."],
        "schema": "{}",
        "tag": "3f2a9c1e",
    },
    "client_tool_closed.md.j2": {"expired": False},
    "schema_reask.md.j2": {"problem": "at $.city: 'x' is not of type 'integer'", "schema": "{}"},
    "media_unread.md.j2": {"line": "Voice notes are off."},
    "scheduled_turn.md.j2": {
        "id": "3f2a9c1e",
        "rule": "every day at 09:00 (cron `0 9 * * *`, Europe/Berlin)",
        "created": "2026-11-22",
        "text": "remind me to call mum",
    },
    "task.md.j2": {
        "id": "3f2a",
        "label": "Oslo flights",
        "time": "2026-11-25T16:40:00+00:00",
        "task": "Find the three cheapest flights to Oslo next week.",
    },
    "tasks.md.j2": {"tools": ["read_file", "spawn"]},
    "tool_images.md.j2": {"paths": ["media/tool-3f2a9c1e.png"]},
    "config.toml.j2": {"model": "openai/gpt-4o-mini", "api_key": "", "api_base": ""},
    "usage.md.j2": {
        "chat": "telegram:42",
        "last_turn": "1,200 prompt (1,024 cached) · 80 completion · 2 calls · $0.0003",
        "today": "2,400 prompt · 160 completion · 4 calls · $0.0006",
        "week": "2,400 prompt · 160 completion · 5 calls · $0.0006 + unknown (1 unpriced)",
        "purposes": [("consolidation", "1 call"), ("turn", "4 calls")],
        "home_today": None,
        "unpriced": ["openai/local-model"],
        "recorded": True,
    },
    "home_exported.md.j2": {
        "where": "nanomem-home-20261127-101500.tar.gz",
        "archive": "10.4 KB",
        "unpacked": "17.1 KB",
        "files": "17 files",
        "parts": [("workspace", "5 files")],
        "secrets": ["llm.api_key"],
        "dropped": [],
        "left_out": ["logs: log files"],
    },
    "home_imported.md.j2": {
        "home": "/home/ada/.nanomem",
        "files": "17 files",
        "created": "2026-11-27T10:15:00Z",
        "made_by": "0.1.0",
        "aside": "",
        "secrets": ["llm.api_key"],
        "problem": "",
        "runs": ["mcp.servers.files starts: npx -y server-filesystem /srv/notes"],
    },
    "telegram_onboard.md.j2": {"part": "done", "bot": "my_bot", "owner": 4242, "config": "c"},
}


def test_every_bundled_template_has_a_sample() -> None:
    assert set(Templates().names()) == set(SAMPLES)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_template_renders(name: str) -> None:
    text = Templates().render(name, **SAMPLES[name])
    assert text.strip()


def test_missing_variables_are_errors_not_blanks() -> None:
    with pytest.raises(UndefinedError):
        Templates().render("iteration_limit.md.j2")


def test_every_error_category_has_its_own_message() -> None:
    categories = get_args(ErrorCategory)  # every category the providers can report
    texts = {
        Templates().render(
            "provider_error.md.j2", category=c, model="m", key_source="k", proxy="", url="u", log=""
        )
        for c in categories
    }
    assert len(texts) == len(categories)
    proxied = Templates().render(
        "provider_error.md.j2",
        category="unreachable",
        model="m",
        key_source="k",
        proxy="http://p:3128",
        url="u",
        log="",
    )
    assert "through the proxy at http://p:3128" in proxied and proxied not in texts


def test_workspace_override_wins(tmp_path: Path) -> None:
    (tmp_path / "help.md.j2").write_text("custom help with {{ commands | length }} commands")
    assert (
        Templates(tmp_path).render("help.md.j2", commands=[1, 2]) == "custom help with 2 commands"
    )


def test_config_template_is_valid_toml_with_every_setting() -> None:
    import tomllib

    from nanomem.config import Settings

    text = Templates().render("config.toml.j2", model="openai/x", api_key="sk-1", api_base="")
    data = tomllib.loads(text)
    assert data["llm"]["model"] == "openai/x" and data["llm"]["api_key"] == "sk-1"
    for section, model in Settings.model_fields.items():
        assert model.annotation is not None
        for key, field in model.annotation.model_fields.items():  # type: ignore[union-attr]
            nested = field.annotation
            if isinstance(nested, type) and issubclass(nested, BaseModel):  # [tools.web]
                assert f"[{section}.{key}]" in text, f"{section}.{key} has no table"
                for inner in nested.model_fields:
                    assert f"{inner} =" in text, f"{section}.{key}.{inner} is not documented"
                continue
            assert f"{key} =" in text, f"{section}.{key} is not documented in config.toml"


def test_context_builder_lists_skills_and_overrides(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "skills" / "weather").mkdir(parents=True)
    (workspace / "skills" / "weather" / "SKILL.md").write_text(
        "---\nname: weather\ndescription: Look up the forecast\n---\nUse the API.\n"
    )
    (workspace / "SOUL.md").write_text("Speak like a pirate.")
    skills = Skills(workspace / "skills")
    builder = ContextBuilder(workspace, Templates(workspace / "templates"), skills, ["read_skill"])
    prompt = builder.render_system_prompt("cli:direct", False)
    assert "Speak like a pirate." in prompt
    assert "`weather`: Look up the forecast" in prompt
    assert skills.read_skill("weather").endswith("Use the API.\n")
    (workspace / "templates").mkdir()
    (workspace / "templates" / "system.md.j2").write_text("mine: {{ files.soul }}")
    assert builder.render_system_prompt("cli:direct", False) == "mine: Speak like a pirate."
    msg = InboundMessage("telegram", "42", "hi", timestamp=datetime(2026, 1, 2, 3, 4, tzinfo=UTC))
    user = builder.user_message(msg)
    assert user["content"].startswith("[runtime · 2026-01-02")
    assert "channel telegram" in user["content"] and user["content"].endswith("\n\nhi")


async def test_chats_share_a_rendering_but_never_each_others_history(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "memory").mkdir(parents=True)
    history = HistoryStore(workspace / "memory")
    skills = Skills(workspace / "skills")
    builder = ContextBuilder(
        workspace, Templates(), skills, ["read_skill"], history, history_chars=4000
    )
    plain = builder.render_system_prompt("telegram:1", False)
    assert builder.render_system_prompt("telegram:2", False) == plain
    await history.append([NewEntry("telegram:1", "Ada prefers tea over coffee.", "summary")])
    assert "prefers tea" in builder.render_system_prompt("telegram:1", False)
    assert builder.render_system_prompt("telegram:2", False) == plain
    (workspace / "skills" / "weather").mkdir(parents=True)
    (workspace / "skills" / "weather" / "SKILL.md").write_text(
        "---\nname: weather\ndescription: Look up the forecast\n---\n"
    )
    for chat in ("telegram:1", "telegram:2"):
        assert "`weather`: Look up the forecast" in builder.render_system_prompt(chat, False)


def test_bundled_data_folders_exist() -> None:
    assert (bundled_dir("workspace-template") / "SOUL.md").is_file()
    assert (bundled_dir("templates") / "system.md.j2").is_file()


PAYLOADS = [
    "{{ cycler.__init__.__globals__.os.popen('touch PWNED').read() }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ self._TemplateReference__context.cycler.__init__.__globals__.os.system('touch PWNED') }}",
    "{% set x = [] %}{{ x.append(1) }}",  # mutating calls are refused too
    "{{ broken",
]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_hostile_or_broken_override_runs_nothing_and_falls_back(
    tmp_path: Path, payload: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    overrides = tmp_path / "templates"
    overrides.mkdir()
    (overrides / "help.md.j2").write_text(payload)
    with log_lines("WARNING") as logged:
        shown = Templates(overrides).render("help.md.j2", commands=[])
    assert shown == Templates().render("help.md.j2", commands=[])  # the bundled text
    assert not (tmp_path / "PWNED").exists()
    if "touch PWNED" in payload:  # positive control: without the sandbox it does touch it
        control = tmp_path / "control"
        control.mkdir()
        monkeypatch.chdir(control)
        jinja2.Environment().from_string(payload).render()
        assert (control / "PWNED").exists()
    assert len(logged) == 1 and str(overrides / "help.md.j2") in logged[0]
    assert "the bundled one is used instead" in logged[0]
