"""Which path a model takes: the lean OpenAI-compatible client, or litellm.

`llm.transport = "auto"` (the default) sends every OpenAI-compatible endpoint through the lean
client (openai_http.py: one POST on a kept-alive connection, ~10x less CPU a call, and
no 2 s import) and only providers whose APIs need translation through litellm. Cheap to import:
`nanomem status` uses it, and nothing here may load an HTTP client or litellm.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from nanomem.config import ENV_DELIMITER, ENV_PREFIX
from nanomem.providers.proxies import proxy_for

if TYPE_CHECKING:
    from nanomem.config import LLMSettings

OPENAI_BASE = "https://api.openai.com/v1"
Path = Literal["direct", "litellm"]


@dataclass(frozen=True)
class Host:
    """An OpenAI-compatible API known by its litellm prefix, with litellm's defaults."""

    base: str | None  # None: the person must give llm.api_base (a server of their own)
    key_variable: str | None  # the provider's own environment variable for the key
    base_variable: str | None = None  # the variable litellm reads for another base URL
    needs_key: bool = True  # hosted: a call without a key is refused before it leaves


# litellm prefixes of OpenAI-compatible APIs, with the base URLs and variables litellm uses.
OPENAI_COMPATIBLE: dict[str, Host] = {
    "openai": Host(OPENAI_BASE, "OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "openrouter": Host("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY", "OPENROUTER_API_BASE"),
    "deepseek": Host("https://api.deepseek.com/v1", "DEEPSEEK_API_KEY", "DEEPSEEK_API_BASE"),
    "groq": Host("https://api.groq.com/openai/v1", "GROQ_API_KEY", "GROQ_API_BASE"),
    "xai": Host("https://api.x.ai/v1", "XAI_API_KEY", "XAI_API_BASE"),
    "together_ai": Host("https://api.together.xyz/v1", "TOGETHERAI_API_KEY", "TOGETHERAI_API_BASE"),
    "deepinfra": Host(
        "https://api.deepinfra.com/v1/openai", "DEEPINFRA_API_KEY", "DEEPINFRA_API_BASE"
    ),
    "cerebras": Host("https://api.cerebras.ai/v1", "CEREBRAS_API_KEY", "CEREBRAS_API_BASE"),
    "ollama": Host("http://localhost:11434/v1", "OLLAMA_API_KEY", "OLLAMA_API_BASE", False),
    "ollama_chat": Host("http://localhost:11434/v1", "OLLAMA_API_KEY", "OLLAMA_API_BASE", False),
    "lm_studio": Host("http://localhost:1234/v1", "LM_STUDIO_API_KEY", "LM_STUDIO_API_BASE", False),
    "llamafile": Host("http://127.0.0.1:8080/v1", "LLAMAFILE_API_KEY", "LLAMAFILE_API_BASE", False),
    "hosted_vllm": Host(None, "HOSTED_VLLM_API_KEY", "HOSTED_VLLM_API_BASE", False),
}
# Ollama's own API lives at the root; its OpenAI-compatible one under /v1.
_V1_SUFFIXED = frozenset({"ollama", "ollama_chat"})
# Names OpenAI serves that litellm recognises without a prefix.
OPENAI_BARE = ("gpt-", "chatgpt-", "o1", "o3", "o4")


@dataclass(frozen=True)
class Route:
    path: Path
    reason: str
    model: str  # the name sent to the endpoint (litellm: the configured name)
    base_url: str = ""  # direct only
    key_variable: str | None = None  # where the key comes from when llm.api_key is unset
    needs_key: bool = False  # direct: refuse a keyless call to a hosted API before sending
    # OpenAI's newer models refuse max_tokens; other servers may not know its successor.
    max_tokens_field: str = "max_tokens"
    proxy: str = ""  # direct: the proxy it goes through (scheme://host:port, no credentials)

    def describe(self) -> str:
        """One line for `nanomem status`."""
        if self.path == "direct":
            via = f" through the proxy at {self.proxy}" if self.proxy else ""
            base = self.base_url or "(no api_base)"
            return f"lean client (direct) to {base}{via}: {self.reason}"
        return f"litellm: {self.reason}"


def route(llm: LLMSettings) -> Route:
    """The one place that decides which client talks to `llm.model`, and why."""
    prefix, _, rest = llm.model.partition("/")
    if not rest:
        prefix, rest = "", llm.model
    host = OPENAI_COMPATIBLE.get(prefix)
    if llm.transport == "litellm":
        return _litellm(llm, prefix, "llm.transport = litellm")
    if llm.transport == "direct":
        chosen = _direct(llm, prefix, rest, host, "llm.transport = direct")
    else:
        chosen = _auto(llm, prefix, rest, host)
    proxy = proxy_for(chosen.base_url, llm.proxy) if chosen.path == "direct" else None
    if proxy is None:
        return chosen
    if proxy.usable:  # the lean client connects through it (connection.py asks proxy_for too)
        return replace(chosen, proxy=proxy.shown)
    if llm.transport == "direct":  # an explicit choice stands: the lean client connects directly
        return replace(chosen, reason=f"{chosen.reason} (not through {proxy.variable})")
    # A proxy of a scheme httpx does not speak (socks4://): litellm, as before SOCKS5 was spoken.
    return _litellm(llm, prefix, proxy.problem)


def _auto(llm: LLMSettings, prefix: str, rest: str, host: Host | None) -> Route:
    if host is not None:
        if prefix == "openai" and llm.api_base:
            why = "openai/ with llm.api_base: an OpenAI-compatible server"
        elif prefix == "openai":
            why = "openai/ is OpenAI's own API"
        else:
            why = f"{prefix}/ is an OpenAI-compatible API"
        return _direct(llm, prefix, rest, host, why)
    if prefix and llm.api_base and not _needs_translation(prefix):
        return _direct(llm, prefix, rest, None, "llm.api_base is an OpenAI-compatible server")
    if not prefix and llm.api_base:
        return _direct(llm, prefix, rest, None, "llm.api_base is an OpenAI-compatible server")
    if not prefix and rest.startswith(OPENAI_BARE):
        openai = OPENAI_COMPATIBLE["openai"]
        return _direct(llm, "openai", rest, openai, f"{rest} is an OpenAI model")
    if prefix:
        return _litellm(llm, prefix, f"{prefix}/ needs litellm's translation to its own API")
    return _litellm(llm, prefix, f"litellm knows which provider serves {llm.model or '(none)'}")


def endpoint(llm: LLMSettings) -> str:
    """Where calls for `llm.model` go, as a person may see it (no credentials, no query): the
    base URL, the provider's default when llm.api_base is unset."""
    from nanomem.text.masking import shown_url

    chosen = route(llm)
    if chosen.path == "direct":
        return shown_url(chosen.base_url)
    if llm.api_base:
        return shown_url(llm.api_base)
    prefix = llm.model.split("/", 1)[0] if "/" in llm.model else llm.model
    return f"litellm's default endpoint for {prefix or '(no model)'}"


def key_variable(llm: LLMSettings) -> str:
    """The provider's own environment variable for the API key of `llm.model`."""
    found = route(llm).key_variable
    if found:
        return found
    prefix = llm.model.split("/", 1)[0] if "/" in llm.model else "openai"
    return f"{prefix.upper().replace('-', '_')}_API_KEY"


def _needs_translation(prefix: str) -> bool:
    # A known provider of another API family (anthropic/, gemini/, bedrock/, azure/ ...) stays
    # with litellm even behind an api_base (a proxy of that API); other prefixes with an
    # api_base are just model names with a slash, sent whole to the server.
    return prefix in _TRANSLATED


def _direct(llm: LLMSettings, prefix: str, rest: str, host: Host | None, reason: str) -> Route:
    base = llm.api_base
    if host is not None and not base and host.base_variable:
        base = os.environ.get(host.base_variable)
    if prefix == "openai" and not base:
        base = os.environ.get("OPENAI_API_BASE")  # the older name the OpenAI SDK still reads
    if host is not None and not base:
        base = host.base
    base = (base or OPENAI_BASE).rstrip("/")
    if prefix in _V1_SUFFIXED and not base.endswith("/v1"):
        base += "/v1"
    # Only a known provider prefix is stripped: "meta-llama/Llama-3" is a name of its own.
    model = rest if (host is not None or prefix == "openai") else llm.model
    if llm.transport == "direct" and host is None:
        model = llm.model.removeprefix("openai/")  # as `direct` always did
    if prefix == "openai" or host is None:
        hosted = urlsplit(base).hostname == "api.openai.com"
    else:  # a base of one's own (a proxy, a gateway) may well need no key
        hosted = host.needs_key and base == (host.base or "").rstrip("/")
    variable = host.key_variable if host is not None else "OPENAI_API_KEY"
    openai = urlsplit(base).hostname == "api.openai.com"
    field = "max_completion_tokens" if openai else "max_tokens"
    return Route("direct", reason, model, base, variable, hosted, field)


def _litellm(llm: LLMSettings, prefix: str, reason: str) -> Route:
    host = OPENAI_COMPATIBLE.get(prefix)
    if host is not None:
        variable = host.key_variable
    else:
        variable = f"{(prefix or 'openai').upper().replace('-', '_')}_API_KEY"
        variable = _LITELLM_KEYS.get(prefix, variable)
    return Route("litellm", reason, llm.model, key_variable=variable)


# Providers with APIs of their own: litellm translates our OpenAI-format requests for them.
_TRANSLATED = frozenset(
    {
        "anthropic",
        "azure",
        "azure_ai",
        "bedrock",
        "bedrock_converse",
        "cohere",
        "cohere_chat",
        "databricks",
        "gemini",
        "huggingface",
        "mistral",
        "palm",
        "replicate",
        "sagemaker",
        "vertex_ai",
        "vertex_ai_beta",
        "watsonx",
    }
)
# Where litellm looks for keys whose variable is not simply <PREFIX>_API_KEY.
_LITELLM_KEYS = {"vertex_ai": "GOOGLE_APPLICATION_CREDENTIALS", "bedrock": "AWS_ACCESS_KEY_ID"}


def key_source(llm: LLMSettings) -> str:
    """Where the model's API key comes from, for the person to check when it is refused."""
    for name in os.environ:
        if name.upper() == f"{ENV_PREFIX}LLM{ENV_DELIMITER}API_KEY":
            return f"the environment variable {name}"
    if llm.api_key is not None:
        return "`llm.api_key` in config.toml"
    variable = key_variable(llm)
    if variable in os.environ:
        return f"the environment variable {variable}"
    return f"no key is set (`llm.api_key`, or {variable})"
