"""The shell as a feature (tools.shell_enabled): the `exec` tool, asking the owner before a
command runs (tools.shell_approval), and the commands that answer and keep the allowlist."""

from __future__ import annotations

from nanomem.agent import Command, Core, Feature
from nanomem.features.shell_approval.approval import Allowlist, ShellApproval
from nanomem.tools import Limits, ShellTool, Tool


class Shell(Feature):
    name = "shell"

    def __init__(self, tool: ShellTool, approval: ShellApproval) -> None:
        self.tool, self.approval = tool, approval

    def tools(self) -> list[Tool]:
        return self.tool.tools()

    def commands(self) -> list[Command]:
        return self.approval.commands()


def build(core: Core) -> Shell | None:
    settings, home = core.settings.tools, core.home
    if not settings.shell_enabled:
        return None
    approval = ShellApproval(
        settings.shell_approval,
        settings.shell_approval_timeout_s,
        Allowlist(home.shell_allowlist, home.lock("shell-allowlist")),
        core.bus.publish_outbound,
    )
    shell = ShellTool(
        core.workspace,
        timeout_s=settings.shell_timeout_s,
        allowed_env=settings.shell_env,
        max_output_chars=settings.max_output_chars,
        approval=approval,
        sandbox=settings.shell_sandbox,
        network=settings.shell_network,
        network_groups=settings.shell_network_groups,
        limits=Limits(**settings.shell_limits.model_dump()),
        # nanomem's home and the config file in use: not even readable in the sandbox
        hidden=[home.root, *([core.config.expanduser()] if core.config is not None else [])],
    )
    return Shell(shell, approval)
