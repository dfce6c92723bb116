"""Shell approval: the owner says yes or no to a command before it runs."""

from typing import TYPE_CHECKING

from nanomem.exports import lazy_exports

if TYPE_CHECKING:
    from nanomem.features.shell_approval.approval import Allowlist, ShellApproval

__all__ = [
    "Allowlist",
    "ShellApproval",
]
__getattr__ = lazy_exports(
    __name__,
    {
        "approval": (
            "Allowlist",
            "ShellApproval",
        ),
    },
)
