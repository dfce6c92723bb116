"""The home folder's paths: config.toml, workspace/, sessions/, logs/, locks/, memory.git.

At the bottom of the stack: every layer may know where things live, none of this does any work.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nanomem.locks import FileLock


def shown_path(path: Path) -> str:
    """`path` as a person would type it: under their home folder, as `~/...`."""
    try:
        return f"~/{path.relative_to(Path.home())}"
    except (ValueError, RuntimeError):  # elsewhere, or no home folder known
        return str(path)


@dataclass(frozen=True)
class Home:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.toml"

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def sessions(self) -> Path:
        return self.root / "sessions"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def chat_history(self) -> Path:
        return self.root / "chat_history"

    @property
    def memory_git(self) -> Path:
        """Versions of the memory files; outside the workspace, so it never collides with a
        git repository the workspace may sit in, and the agent's tools cannot reach it."""
        return self.root / "memory.git"

    @property
    def dream_state(self) -> Path:
        return self.root / "dream.json"

    @property
    def inbox(self) -> Path:
        """Messages the gateway received and has not answered yet (SQLite)."""
        return self.root / "inbox.sqlite3"

    @property
    def dream_journal(self) -> Path:
        """A Dream run's finished edits, until they are applied, committed and consumed."""
        return self.root / "dream-journal.json"

    @property
    def dream_review(self) -> Path:
        """A Dream change waiting for the owner's decision (dream.review = "ask")."""
        return self.root / "dream-review.json"

    @property
    def shell_allowlist(self) -> Path:
        """Command prefixes the owner chose to "always allow" (tools.shell_approval)."""
        return self.root / "shell-allowlist.json"

    @property
    def schedules(self) -> Path:
        """What the chats asked to happen later (features/schedules/rules.py)."""
        return self.root / "schedules.json"

    @property
    def unread(self) -> Path:
        """What the agent said unasked in a chat nobody has open (a terminal session's
        reminder), a file per session until the chat shows it (agent/unread.py)."""
        return self.root / "unread"

    @property
    def tasks(self) -> Path:
        """Background tasks the chats started: running, and recently ended (features/tasks)."""
        return self.root / "tasks.json"

    @property
    def history_index(self) -> Path:
        """The full-text index of memory/history.jsonl (derived; rebuilt when missing)."""
        return self.root / "index" / "history.sqlite3"

    @property
    def messages_index(self) -> Path:
        """The web app's full-text index of the chats' messages (derived; rebuilt when missing)."""
        return self.root / "index" / "messages.sqlite3"

    @property
    def mcp_state(self) -> Path:
        """Where each MCP server stands, a file per running process, for `nanomem status`
        (features/mcp/state.py)."""
        return self.root / "mcp-state"

    @property
    def sent_files(self) -> Path:
        """Copies of the files agent API answers link to (`/v1/files/<id>`), as they were when
        sent; outside the workspace, so the agent's tools cannot change what a link serves."""
        return self.root / "sent-files"

    @property
    def usage(self) -> Path:
        """Every answered model call's tokens, one line each, appended (features/usage)."""
        return self.root / "usage.jsonl"

    @property
    def telegram_webhook_secret(self) -> Path:
        """The secret Telegram sends with each webhook post, made by the gateway's first start
        in webhook mode when telegram.webhook_secret is unset (mode 0600)."""
        return self.root / "telegram-webhook-secret"

    @property
    def telegram_webhook(self) -> Path:
        """What Telegram last said of the webhook (getWebhookInfo), as the gateway checked it,
        for `nanomem status`."""
        return self.root / "telegram-webhook.json"

    @property
    def gateway(self) -> Path:
        """The running gateway's pid and port, while it holds the `gateway` lock
        (gateway/claim.py); a file left by a killed one means nothing without the lock."""
        return self.root / "gateway.json"

    @property
    def web_logins(self) -> Path:
        """The web app's one-time login codes (hashed) and logged-out logins (web_logins.py)."""
        return self.root / "web-logins.json"

    @property
    def locks(self) -> Path:
        """Lock files shared by every process on this home; outside the workspace, so the
        agent's file tools can never replace one."""
        return self.root / "locks"

    def lock(self, name: str) -> FileLock:
        return FileLock(self.locks / f"{name}.lock")
