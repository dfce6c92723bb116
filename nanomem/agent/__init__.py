"""The agent: messages in, turns, replies out.

The bus and its durable inbox, the channel port, slash commands, the prompt (ContextBuilder,
templates, skills), the ReAct tool loop, the AgentLoop that runs a turn per message, and the
feature seam (Feature, Core) that features plug into.
"""

from typing import TYPE_CHECKING

from nanomem.exports import lazy_exports

if TYPE_CHECKING:
    from nanomem.agent.bus import InboundMessage, MessageBus
    from nanomem.agent.channel import (
        BaseChannel,
        Capabilities,
        Channel,
        ChannelDown,
        ChatQueues,
        DeliveryLater,
        forms,
        pump_outbound,
        save_media,
        shaped,
    )
    from nanomem.agent.commands import STOPPED, Answer, Command, CommandSet, fenced, parse_command
    from nanomem.agent.context import ContextBuilder
    from nanomem.agent.feature import (
        Admits,
        Core,
        Feature,
        HealthReport,
        MediaText,
        OwnerAway,
        Reach,
        TellOwner,
        Unreadable,
        anyone,
        keep_telling,
    )
    from nanomem.agent.inbox import Pending, SqliteInbox, parked_in
    from nanomem.agent.loop import AgentLoop
    from nanomem.agent.markup import plain_text
    from nanomem.agent.outbound import (
        STOPPING,
        STOPPING_NOTE,
        Button,
        Delta,
        DeltaEnd,
        File,
        OutboundMessage,
        Part,
        Progress,
        Question,
        Text,
    )
    from nanomem.agent.react_loop import ReactResult, react, seal_tool_calls
    from nanomem.agent.retries import (
        GIVEN_UP,
        RETRYING,
        Readmit,
        Retries,
        parked_line,
        parked_notice,
        record_failure,
        retry_delay,
    )
    from nanomem.agent.skills import Skills
    from nanomem.agent.templates import Templates, bundled_dir

__all__ = [
    "GIVEN_UP",
    "RETRYING",
    "STOPPED",
    "STOPPING",
    "STOPPING_NOTE",
    "Admits",
    "AgentLoop",
    "Answer",
    "BaseChannel",
    "Button",
    "Capabilities",
    "Channel",
    "ChannelDown",
    "ChatQueues",
    "Command",
    "CommandSet",
    "ContextBuilder",
    "Core",
    "DeliveryLater",
    "Delta",
    "DeltaEnd",
    "Feature",
    "File",
    "HealthReport",
    "InboundMessage",
    "MediaText",
    "MessageBus",
    "OutboundMessage",
    "OwnerAway",
    "Part",
    "Pending",
    "Progress",
    "Question",
    "Reach",
    "ReactResult",
    "Readmit",
    "Retries",
    "Skills",
    "SqliteInbox",
    "TellOwner",
    "Templates",
    "Text",
    "Unreadable",
    "anyone",
    "bundled_dir",
    "fenced",
    "forms",
    "keep_telling",
    "parked_in",
    "parked_line",
    "parked_notice",
    "parse_command",
    "plain_text",
    "pump_outbound",
    "react",
    "record_failure",
    "retry_delay",
    "save_media",
    "seal_tool_calls",
    "shaped",
]
__getattr__ = lazy_exports(
    __name__,
    {
        "bus": ("InboundMessage", "MessageBus"),
        "channel": (
            "BaseChannel",
            "Capabilities",
            "Channel",
            "ChannelDown",
            "ChatQueues",
            "DeliveryLater",
            "pump_outbound",
            "save_media",
            "forms",
            "shaped",
        ),
        "commands": ("Answer", "Command", "CommandSet", "STOPPED", "fenced", "parse_command"),
        "context": ("ContextBuilder",),
        "feature": (
            "Admits",
            "Core",
            "Feature",
            "HealthReport",
            "MediaText",
            "OwnerAway",
            "Reach",
            "TellOwner",
            "Unreadable",
            "anyone",
            "keep_telling",
        ),
        "inbox": ("Pending", "SqliteInbox", "parked_in"),
        "loop": ("AgentLoop",),
        "markup": ("plain_text",),
        "outbound": (
            "STOPPING",
            "STOPPING_NOTE",
            "Button",
            "Delta",
            "DeltaEnd",
            "File",
            "OutboundMessage",
            "Part",
            "Progress",
            "Question",
            "Text",
        ),
        "react_loop": ("ReactResult", "react", "seal_tool_calls"),
        "retries": (
            "GIVEN_UP",
            "RETRYING",
            "Readmit",
            "Retries",
            "parked_line",
            "parked_notice",
            "record_failure",
            "retry_delay",
        ),
        "skills": ("Skills",),
        "templates": ("Templates", "bundled_dir"),
    },
)
