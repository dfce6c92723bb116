"""Whether the model answers: one request of one token through the path a chat takes (the
lean client or litellm), with a short timeout and no retries, naming the URL it tried."""

from __future__ import annotations

import os

from nanomem.config import LLMSettings
from nanomem.doctor.finding import Finding
from nanomem.providers import ProviderError, endpoint, key_source, route
from nanomem.text.masking import masked, secret_of

TIMEOUT_S = 15.0
ASK = [{"role": "user", "content": "Reply with one word: OK"}]
SET_MODEL = "nanomem config set llm.model openai/<name>"


async def model(llm: LLMSettings) -> Finding:
    if not llm.model:
        return Finding.fail("model", "llm.model is not set", SET_MODEL)
    path = route(llm)
    where = endpoint(llm)
    via = "lean client" if path.path == "direct" else "litellm"
    url = f"{where}/chat/completions" if path.path == "direct" else where
    key = secret_of(llm.api_key) or os.environ.get(path.key_variable or "", "")
    said = f"{llm.model} via {via}, key {masked(key) if key else 'none'}"
    quick = llm.model_copy(update={"timeout_s": min(llm.timeout_s, TIMEOUT_S), "stream": False})
    from nanomem.providers import LiteLLMProvider, OpenAIHTTPProvider, Provider

    client: Provider = (
        OpenAIHTTPProvider(quick, route(quick)) if path.path == "direct" else LiteLLMProvider(quick)
    )
    try:
        await client.complete(ASK, max_tokens=1)
    except ProviderError as exc:
        if exc.category == "empty":  # it answered, with nothing in one token (a reasoning model)
            return Finding.ok("model", f"{said}: {url} answered")
        return _failed(llm, exc, said, url, quick.timeout_s, has_key=bool(key))
    finally:
        close = getattr(client, "close", None)
        if close is not None:
            await close()
    return Finding.ok("model", f"{said}: {url} answered")


def _failed(
    llm: LLMSettings, exc: ProviderError, said: str, url: str, seconds: float, *, has_key: bool
) -> Finding:
    detail = f" ({exc.detail[:200]})" if exc.detail else ""
    base = "nanomem config set llm.api_base http://HOST:PORT/v1"
    match exc.category:
        case "unreachable":
            found, fix = f"could not reach {url}{detail}", f"check the server runs, or {base}"
        case "timeout":
            found = f"no answer from {url} within {seconds:g} s"
            fix = "check the server; a slow local model may need a larger llm.timeout_s"
        case "auth" if not has_key:
            found = f"{url} needs an API key, and {key_source(llm)}"
            fix = "nanomem config set llm.api_key <key>"
        case "auth":
            found = f"{url} refused the key{detail}; it came from {key_source(llm)}"
            fix = "nanomem config set llm.api_key <key>"
        case "not_found":
            found, fix = f"{url} does not know the model {llm.model}{detail}", SET_MODEL
        case "rate_limited":
            return Finding.warn("model", f"{said}: {url} answered, rate limiting", "try later")
        case "quota":
            found, fix = f"{url}: out of quota or credit{detail}", "check billing with the provider"
        case _:
            found = f"{url} answered with an error ({exc.category}){detail}"
            fix = "check llm.model and llm.api_base; the server's log says more"
    return Finding.fail("model", f"{said}: {found}", fix)
