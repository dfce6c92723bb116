import copy
import json
import pickle

import pytest

from nanomem.providers.provider import ProviderError, RetryingProvider, WireMessage, encode_messages
from nanomem.providers.scripted import ScriptedProvider, text


async def test_retries_transient_errors_then_succeeds() -> None:
    inner = ScriptedProvider(
        [ProviderError("rate_limited", retry_after=0.05), ProviderError("server"), text("ok")]
    )
    provider = RetryingProvider(inner, max_retries=3, base_delay=0.01)
    reply = await provider.complete([{"role": "user", "content": "hi"}])
    assert reply.content == "ok"
    assert len(inner.calls) == 3


async def test_gives_up_after_max_retries() -> None:
    inner = ScriptedProvider([ProviderError("timeout")] * 5)
    with pytest.raises(ProviderError) as err:
        await RetryingProvider(inner, max_retries=2, base_delay=0.01).complete([])
    assert err.value.category == "timeout"
    assert err.value.attempts == 3
    assert len(inner.calls) == 3


@pytest.mark.parametrize("category", ["auth", "context_too_long", "bad_request", "quota"])
async def test_permanent_errors_are_not_retried(category: str) -> None:
    inner = ScriptedProvider([ProviderError(category), text("never")])  # type: ignore[arg-type]
    with pytest.raises(ProviderError):
        await RetryingProvider(inner, max_retries=3, base_delay=0.01).complete([])
    assert len(inner.calls) == 1


async def test_long_retry_after_is_reported_not_waited() -> None:
    inner = ScriptedProvider([ProviderError("rate_limited", retry_after=3600), text("late")])
    with pytest.raises(ProviderError) as err:
        await RetryingProvider(inner, max_retries=3, max_retry_after=60).complete([])
    assert err.value.category == "rate_limited"
    assert len(inner.calls) == 1


def test_a_wire_message_is_read_only_and_its_copies_are_plain() -> None:
    message = WireMessage(role="user", content="héllo")
    for change in (
        lambda: message.__setitem__("content", "x"),
        lambda: message.update(content="x"),
        lambda: message.pop("content"),
        lambda: message.__delitem__("role"),
    ):
        with pytest.raises(TypeError):
            change()
    assert message == {"role": "user", "content": "héllo"}
    for copied in (dict(message), copy.deepcopy(message), pickle.loads(pickle.dumps(message))):
        assert type(copied) is dict and copied == message
        copied["content"] = "changed"  # a copy is the caller's to change
    assert json.loads(message.json()) == message


def test_encoded_messages_are_the_json_of_the_list() -> None:
    messages = [WireMessage(role="user", content='a\n"b"'), {"role": "assistant", "content": "ü"}]
    assert json.loads(encode_messages(messages)) == messages
    assert encode_messages(messages) == json.dumps(messages)
