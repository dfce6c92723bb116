"""Token accounting: offline counts, calibrated against the usage the provider reports."""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from nanomem.config import LLMSettings, MemorySettings, prompt_room

MESSAGE_OVERHEAD = 4  # role and separators, as OpenAI counts them
# An image as the big hosted models count it at most: a Telegram photo (1280×720) is 1,105
# tokens to gpt-4o (high detail; 1,445 at worst) and ~1,230 to Claude (~1,600 at its cap).
IMAGE_TOKENS = 1600


class Tokenizer(Protocol):
    def count(self, text: str) -> int: ...


class ByteBound:
    """UTF-8 bytes: every BPE token is at least one byte, so this bounds the exact count from
    above at no cost (no tokenizer to load). Lone surrogates count as tiktoken sees them."""

    def count(self, text: str) -> int:
        return len(text.encode("utf-8", "surrogatepass"))


class BpeTokenizer:
    """cl100k via tiktoken, reading the BPE file litellm ships (so it works offline and
    without paying for importing litellm itself)."""

    def __init__(self) -> None:
        self._encoding: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._encoding is None:
                spec = importlib.util.find_spec("litellm")
                if spec and spec.submodule_search_locations:
                    bundled = Path(next(iter(spec.submodule_search_locations)))
                    tokenizers = bundled / "litellm_core_utils" / "tokenizers"
                    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(tokenizers))
                self._encoding = _cl100k()
        return self._encoding

    @property
    def loaded(self) -> bool:
        return self._encoding is not None

    def count(self, text: str) -> int:
        encoding = self._encoding or self._load()
        return len(encoding.encode_ordinary(text))


# cl100k as tiktoken_ext.openai_public defines it (tests/memory/test_tokens_load.py checks
# they agree).
_CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
_CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_CL100K_SPECIAL = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}


def _cl100k() -> Any:
    """tiktoken's cl100k encoding, its 100k-line BPE file parsed in one pass: tiktoken's own
    loader decodes it line by line (~0.17 s, a third of a one-shot `chat -m`; this ~0.04 s)."""
    import tiktoken

    try:
        mergeable = _cl100k_ranks()
    except (OSError, ValueError):
        return tiktoken.get_encoding("cl100k_base")  # its own loader says what is wrong
    return tiktoken.Encoding(
        "cl100k_base",
        pat_str=_CL100K_PATTERN,
        mergeable_ranks=mergeable,
        special_tokens=_CL100K_SPECIAL,
    )


def _cl100k_ranks() -> dict[bytes, int]:
    # A function of its own so the file and its split lines are freed before tiktoken copies
    # the ranks (peak memory stays what tiktoken's own loader needs).
    import binascii

    from tiktoken.load import read_file_cached

    parts = read_file_cached(_CL100K_URL, _CL100K_SHA256).split()  # checks the file's hash
    tokens, ranks = parts[::2], parts[1::2]
    del parts
    # binascii.Error is a ValueError; zip(strict=True) raises one for an odd line count.
    return dict(zip(map(binascii.a2b_base64, tokens), map(int, ranks), strict=True))


def message_tokens(tokenizer: Tokenizer, message: dict[str, Any]) -> int:
    total = MESSAGE_OVERHEAD
    content = message.get("content")
    if isinstance(content, str):
        total += tokenizer.count(content)
    elif isinstance(content, list):
        for part in content:
            if part.get("type") == "text":
                total += tokenizer.count(part.get("text", ""))
            else:
                total += IMAGE_TOKENS
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        total += tokenizer.count(function.get("name", "")) + tokenizer.count(
            function.get("arguments", "")
        )
    return total


class Calibration:
    """Our estimate × factor ≈ what the provider counted; learned from each reply's usage."""

    def __init__(self, initial: float = 1.1, weight: float = 0.3) -> None:
        self.factor = initial
        self.weight = weight

    def observe(self, estimated: int, actual: int) -> None:
        # Tiny prompts are dominated by provider overheads; they would teach the wrong ratio.
        if estimated < 200 or actual <= 0:
            return
        ratio = min(4.0, max(0.8, actual / estimated))
        self.factor = (1 - self.weight) * self.factor + self.weight * ratio

    def apply(self, estimated: int) -> int:
        return int(estimated * self.factor)


@dataclass
class Budget:
    """How many prompt tokens a turn may use, and the consolidation trigger and target.

    Counts start as byte bounds (`ByteBound`): while a prompt's bound, calibrated, stays under
    the consolidation trigger, every decision is the one exact counts would give (nothing to
    consolidate, all history replayed), and the ~0.15 s tokenizer load is not paid. The first
    estimate that could reach the trigger switches to exact counts for good (`settled`), and
    `on_exact` hooks drop the counts made so far (sessions recount lazily)."""

    tokenizer: Tokenizer
    calibration: Calibration
    llm: LLMSettings
    memory: MemorySettings
    exact: bool = False
    on_exact: list[Callable[[], None]] = field(default_factory=list, repr=False)
    _memo: dict[str, int] = field(default_factory=dict, repr=False)
    _bound: Tokenizer = field(default_factory=ByteBound, repr=False)

    @property
    def prompt_limit(self) -> int:
        return max(512, prompt_room(self.llm))

    @property
    def trigger(self) -> int:
        return int(self.prompt_limit * self.memory.consolidate_at)

    @property
    def target(self) -> int:
        return int(self.prompt_limit * self.memory.consolidate_to)

    @property
    def history_chars(self) -> int:
        """Room for history entries in the prompt, in characters (≈4 a token)."""
        return int(self.prompt_limit * self.memory.history_share * 4)

    @property
    def counter(self) -> Tokenizer:
        return self.tokenizer if self.exact else self._bound

    def settled(self, estimate: int) -> bool:
        """Whether a calibrated estimate can be used as is; one made of byte bounds that
        could reach the trigger cannot: counting turns exact, and the caller counts again."""
        if self.exact or estimate <= self.trigger:
            return True
        self.use_exact()
        return False

    def use_exact(self) -> None:
        if self.exact:
            return
        self.exact = True
        self._memo.clear()
        for hook in self.on_exact:
            hook()

    def observe(self, estimated: int, actual: int, *, exact: bool) -> None:
        """Calibrate on the provider's count of a prompt `estimated` (`exact`ly or by byte
        bounds). Bounds would teach a wrong ratio; one that fell short of the provider's
        count is no bound for it: count exactly from then on."""
        if exact:
            self.calibration.observe(estimated, actual)
        elif actual > self.calibration.apply(estimated):
            self.use_exact()

    def count(self, message: dict[str, Any]) -> int:
        return message_tokens(self.counter, message)

    def count_tools(self, schema_text: str) -> int:
        return self.count_prompt_text(schema_text)

    def count_system(self, text: str) -> int:
        return MESSAGE_OVERHEAD + self.count_prompt_text(text)

    def count_prompt_text(self, text: str) -> int:
        """System prompts and tool schemas repeat turn after turn (one per chat, and the
        loop and the Consolidator both ask), so their counts are remembered by text."""
        counted = self._memo.get(text)
        if counted is None:
            if len(self._memo) >= 512:
                self._memo.clear()
            counted = self._memo[text] = self.counter.count(text)
        return counted
