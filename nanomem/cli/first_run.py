"""The questions a first run asks a person at a terminal: the model, the server it runs on and
the API key, each only when no flag, variable or file gave it, and each once."""

from __future__ import annotations

import getpass
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from nanomem.providers import key_variable, model_name_problem, model_shape_problem, route

if TYPE_CHECKING:
    from pathlib import Path

    from nanomem.config import LLMSettings, TelegramSettings
    from nanomem.locks import FileLock

Ask = Callable[[str], str]
FIRST_QUESTION = "Model (e.g. openai/gpt-4o-mini; empty to set later): "
# A later run of `chat` on a config without a model: it cannot go on without one.
NOW_QUESTION = "Model to use now (saved to the config, e.g. openai/gpt-4o-mini; Ctrl-D quits): "
NEEDED = "A model is needed to chat: type its name, or press Ctrl-D to quit."


@dataclass(frozen=True)
class Choices:
    """What onboarding writes into a new config.toml (empty: not chosen, left a comment)."""

    model: str = ""
    api_base: str = ""
    api_key: str = ""  # stored only in config.toml, which is created with mode 0600


def ask_missing(
    known: LLMSettings,
    given: Choices,
    *,
    ask: Ask = input,
    ask_secret: Ask = getpass.getpass,
    say: Callable[[str], None] = print,
    question: str = FIRST_QUESTION,
) -> Choices:
    """`given` (the flags) completed by questions for what `known` (flags, environment, an
    existing file) lacks. A typed name no client can place is explained and asked again; a
    flag's raises ValueError with the explanation. With NOW_QUESTION an empty answer is asked
    again too; after three tries the model is still empty."""
    choices = given
    for _ in range(3):
        if known.model and not choices.model:
            break  # set elsewhere (a variable, a flag of `chat`): not ours to question
        model = choices.model or ask(question)
        if not (model := model.strip()) and question == FIRST_QUESTION:
            break
        if not model:
            say(NEEDED)
            continue
        if shape := model_shape_problem(model):  # no server's name: said before the base URL
            if choices.model:
                raise ValueError(shape)
            say(shape)
            continue
        api_base, typed_base = choices.api_base or known.api_base or "", ""
        if not api_base and (model.startswith("openai/") or "/" not in model):
            api_base = typed_base = ask(
                "Base URL of the OpenAI-compatible server it runs on, if not OpenAI's own "
                "API (e.g. http://localhost:11434/v1; empty for none): "
            ).strip()
        problem = model_name_problem(model, api_base or None)
        if problem and choices.model:
            raise ValueError(problem)
        if problem:
            say(problem)
            continue
        choices = replace(choices, model=model, api_base=choices.api_base or typed_base)
        break
    llm = known.model_copy(
        update={
            "model": choices.model or known.model,
            "api_base": choices.api_base or known.api_base,
        }
    )
    if not llm.model or _has_key(llm):
        return choices
    variable = key_variable(llm)
    if variable in os.environ:
        say(f"Using the API key in the environment variable {variable}.")
        return choices
    chosen = route(llm)
    own_server = chosen.path == "direct" and not chosen.needs_key
    key = ask_secret(
        "API key (hidden; saved in config.toml, readable by you only; "
        + ("empty if the server needs none): " if own_server else f"empty to set {variable}): ")
    ).strip()
    return replace(choices, api_key=key)


def _has_key(llm: LLMSettings) -> bool:
    return llm.api_key is not None and bool(llm.api_key.get_secret_value())


def ask_owner(
    telegram: TelegramSettings, *, ask: Ask = input, say: Callable[[str], None] = print
) -> int | None:
    """With Telegram enabled and no telegram.owner: the owner's numeric user id (None: later)."""
    if not telegram.enabled or telegram.owner is not None:
        return None
    for _ in range(3):
        typed = ask(
            "Your numeric Telegram user id, the owner (only the owner runs owner commands and "
            "approvals; empty to set telegram.owner later): "
        ).strip()
        if not typed:
            return None
        if typed.isdigit() and int(typed) > 0:
            return int(typed)
        say(f"{typed!r} is not a numeric user id (a positive number, such as 123456789).")
    return None


def ask_model_now(
    known: LLMSettings,
    config: Path,
    lock: FileLock,
    *,
    ask: Ask = input,
    ask_secret: Ask = getpass.getpass,
    say: Callable[[str], None] = print,
) -> bool:
    """A later run's question for the model `config` lacks, checked as the first run's is;
    what was answered is saved in `config` once valid. False: nothing valid, nothing saved."""
    from nanomem.cli.onboard import set_config_values

    choices = ask_missing(
        known, Choices(), ask=ask, ask_secret=ask_secret, say=say, question=NOW_QUESTION
    )
    if not choices.model:
        return False
    answers = {"model": choices.model, "api_base": choices.api_base, "api_key": choices.api_key}
    set_config_values(config, "llm", {k: v for k, v in answers.items() if v}, lock)
    return True
