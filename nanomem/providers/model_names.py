"""Model names checked offline, before the first call: a name that no client can place stops
the start with a sentence saying what to write instead, not a vague failure at the first turn.

Cheap to import and to run: a table, never litellm itself (its import costs ~2 s that the lean
path exists to avoid). tests/providers/test_model_names.py keeps the table equal to litellm's
own list.
"""

from __future__ import annotations

from nanomem.providers.routing import OPENAI_BARE, OPENAI_COMPATIBLE

# litellm's provider prefixes (litellm.provider_list of the pinned version).
_PROVIDER_NAMES = """
    a2a a2a_agent ai21 ai21_chat aiml aiohttp_openai amazon_nova anthropic anthropic_text apertis
    assemblyai auto_router aws_polly aws_textract azure azure_ai azure_speech azure_text baseten
    bedrock bedrock_mantle black_forest_labs bytez cerebras charity_engine chatgpt chutes
    clarifai cloudflare codestral cognition cohere cohere_chat cometapi compactifai cortecs
    cursor custom custom_openai darkbloom dashscope databricks datarobot deepgram deepinfra
    deepseek docker_model_runner dotprompt edenai elevenlabs empower fal_ai featherless_ai
    fireworks_ai friendliai galadriel gdc gemini gigachat github github_copilot gradient_ai groq
    helicone heroku hosted_vllm huggingface humanloop hyperbolic inception infinity jina_ai
    lambda_ai langflow langfuse langgraph lemonade libertai litellm_agent litellm_proxy llamafile
    lm_studio manus maritalk meta meta_llama milvus minimax mistral modelscope mongodb moonshot
    morph nadir nano-gpt nebius neosantara nlp_cloud novita nscale nvidia_nim nvidia_riva oci
    ollama ollama_chat oobabooga openai openai_like openrouter ovhcloud parasail perplexity
    petals pg_vector pinstripes poe predibase prism publicai qwen_ai_platform qwencloud ragflow
    recraft reducto replicate runwayml s3_vectors sagemaker sagemaker_chat sagemaker_nova sail
    sambanova sap scaleway scx-ai snowflake soniox stability strands_decider synthetic tencent
    tensormesh text-completion-codestral text-completion-inception text-completion-openai
    together_ai topaz transcribe triton typesafe v0 valkey vercel_ai_gateway vertex_ai
    vertex_ai_beta vllm volcengine voyage wandb watsonx watsonx_text xai xiaomi_mimo xinference
    zai
"""
LITELLM_PROVIDERS = frozenset(_PROVIDER_NAMES.split())
# Families of well-known names and the prefix of the service that hosts them.
HOSTED = {
    "claude": "anthropic",
    "gemini": "gemini",
    "mistral-large": "mistral",
    "mistral-medium": "mistral",
    "mistral-small": "mistral",
    "codestral": "mistral",
    "magistral": "mistral",
    "pixtral": "mistral",
    "command": "cohere",
    "grok": "xai",
    "deepseek-chat": "deepseek",
    "deepseek-reasoner": "deepseek",
}
# Families people mostly run on their own machine (Ollama, llama.cpp, vLLM, LM Studio).
LOCAL = ("llama", "qwen", "phi", "gemma", "mistral", "mixtral", "deepseek", "smollm", "tinyllama")


def model_shape_problem(model: str, key: str = "llm.model") -> str | None:
    """What makes `model` no model name on any server (spaces), or None; needs no api_base, so
    a question can ask again at once."""
    if any(character.isspace() for character in model.strip()):
        return (
            f"{key} `{model}` is not a model name: a name has no spaces "
            "(e.g. openai/gpt-4o-mini, or ollama/llama3.1)"
        )
    return None


def model_name_problem(model: str, api_base: str | None, key: str = "llm.model") -> str | None:
    """What is wrong with `model` and what to write instead, or None when a client can place it.
    With an api_base every name is the server's own, passed to it as it is (none has spaces)."""
    if shape := model_shape_problem(model, key):
        return shape
    if not model or api_base:
        return None
    prefix, slash, _ = model.partition("/")
    if slash and (prefix in OPENAI_COMPATIBLE or prefix in LITELLM_PROVIDERS):
        return None
    if not slash and model.startswith(OPENAI_BARE):
        return None  # OpenAI's own names: they go to OpenAI's API, as litellm sends them
    if slash:
        return (
            f"{key} `{model}`: `{prefix}/` is not a provider prefix; write the provider first "
            f"(`openrouter/{model}`, `together_ai/{model}`, ...), or set llm.api_base to the "
            "server that serves this name"
        )
    lowered = model.lower()
    hosted = next((p for name, p in HOSTED.items() if lowered.startswith(name)), None)
    if hosted:
        return (
            f"{key} `{model}` names no provider: write `{hosted}/{model}`, or "
            f"`openai/{model}` with llm.api_base for an OpenAI-compatible server"
        )
    if lowered.startswith(LOCAL) or ":" in model:  # "llama3.1:8b" is an Ollama tag
        return (
            f"{key} `{model}` names no provider: for a local Ollama write `ollama/{model}`; "
            f"for another OpenAI-compatible server (llama.cpp, vLLM, LM Studio) write "
            f"`openai/{model}` and set llm.api_base to its URL (e.g. http://localhost:8080/v1)"
        )
    return (
        f"{key} `{model}` names no provider: write it as provider/name "
        f"(`openai/{model}`, `anthropic/{model}`, `openrouter/...`), or `openai/{model}` with "
        "llm.api_base for an OpenAI-compatible server of your own"
    )
