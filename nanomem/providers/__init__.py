"""How a model is called.

The Provider protocol and its retries, the routing that picks a path for a model, the lean
OpenAI-compatible client, the litellm client and a scripted provider for tests.
"""

from typing import TYPE_CHECKING

from nanomem.exports import lazy_exports

if TYPE_CHECKING:
    from nanomem.providers.connection import Connection, ConnectionFailed
    from nanomem.providers.litellm_provider import LiteLLMProvider, import_litellm
    from nanomem.providers.metered import (
        AfterCall,
        Charge,
        MeteredProvider,
        ModelCall,
        Purpose,
        charged_to,
    )
    from nanomem.providers.model_names import model_name_problem, model_shape_problem
    from nanomem.providers.openai_http import OpenAIHTTPProvider
    from nanomem.providers.provider import (
        ModelOptions,
        Provider,
        ProviderError,
        Reply,
        RetryingProvider,
        TextSink,
        ToolCall,
        ToolChoice,
        Usage,
        WireMessage,
    )
    from nanomem.providers.routing import endpoint, key_source, key_variable, route
    from nanomem.providers.vision import supports_images

__all__ = [
    "AfterCall",
    "Charge",
    "Connection",
    "ConnectionFailed",
    "LiteLLMProvider",
    "MeteredProvider",
    "ModelCall",
    "ModelOptions",
    "OpenAIHTTPProvider",
    "Provider",
    "ProviderError",
    "Purpose",
    "Reply",
    "RetryingProvider",
    "TextSink",
    "ToolCall",
    "ToolChoice",
    "Usage",
    "WireMessage",
    "charged_to",
    "endpoint",
    "import_litellm",
    "key_source",
    "key_variable",
    "model_name_problem",
    "model_shape_problem",
    "route",
    "supports_images",
]
__getattr__ = lazy_exports(
    __name__,
    {
        "connection": ("Connection", "ConnectionFailed"),
        "litellm_provider": ("LiteLLMProvider", "import_litellm"),
        "metered": (
            "AfterCall",
            "Charge",
            "MeteredProvider",
            "ModelCall",
            "Purpose",
            "charged_to",
        ),
        "model_names": ("model_name_problem", "model_shape_problem"),
        "openai_http": ("OpenAIHTTPProvider",),
        "provider": (
            "ModelOptions",
            "Provider",
            "ProviderError",
            "Reply",
            "RetryingProvider",
            "TextSink",
            "ToolCall",
            "ToolChoice",
            "Usage",
            "WireMessage",
        ),
        "routing": ("endpoint", "key_source", "key_variable", "route"),
        "vision": ("supports_images",),
    },
)
