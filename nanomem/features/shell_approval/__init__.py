"""Shell approval: the owner says yes or no to a command before it runs."""

from typing import TYPE_CHECKING

from nanomem.exports import lazy_exports

if TYPE_CHECKING:
    from nanomem.features.shell_approval.approval import Allowlist, ShellApproval
    from nanomem.features.shell_approval.feature import Shell, build

__all__ = [
    "Allowlist",
    "Shell",
    "ShellApproval",
    "build",
]
__getattr__ = lazy_exports(
    __name__,
    {
        "approval": (
            "Allowlist",
            "ShellApproval",
        ),
        "feature": ("Shell", "build"),
    },
)
