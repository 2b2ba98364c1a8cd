# SPDX-License-Identifier: Apache-2.0
"""How the balancer reads a prompt as tokens, per model: the count a tenant's input-token
quota is charged and the token blocks the KV-event index keys (``kv_event_index``).

A GPU server's ``tokenizer`` (the policy's gpu block, ``BackendSpec.tokenizer``) names it:

- a directory: the model's own Hugging Face tokenizer, ``tokenizer.json`` read with the
  ``tokenizers`` library, and the chat template of ``tokenizer_config.json`` (Jinja, run
  sandboxed) for chat requests: exact counts and token ids, the ones the server computes;
- ``simulator``: the simulated servers' rule (``engines.sim_tokens``), for the simulator
  only: a real server's KV blocks never match it;
- ``estimate`` (and every model no server names a tokenizer for): 4 characters per token
  (plus 4 per chat message) and no token ids, so the exact KV-event index is not used for
  the model (the approximate prefix index is) and ``explain`` says the count is estimated.

Encoding a prompt costs about what reading it does; the last prompts are cached (a prompt
is read twice when ``explain`` follows it, and clients resend the same system prompts)."""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from engines.sim_tokens import chat_stream, completion_stream, ids_bytes, stream_bytes
from regions.balancer.errors import BalancerConfigError
from regions.balancer.scheduling.prefix_blocks import CHARS_PER_TOKEN
from regions.balancer.types import Endpoint

CHAT_TOKENS_PER_MESSAGE = 4
SIMULATOR = "simulator"
ESTIMATE = "estimate"
MAX_ENCODED_CHARS = 1 << 20  # past a MiB of text, the rest is estimated (bounded work)
CACHED_PROMPTS = 256


class PromptTokenizer(Protocol):
    """One model's tokenizer, as the balancer uses it."""

    @property
    def source(self) -> str:
        """What counts the tokens (``explain``): a path, ``simulator`` or ``estimate``."""
        ...

    def read(self, endpoint: Endpoint, body: Mapping[str, Any]) -> tuple[int, bytes | None]:
        """The prompt's token count, and its token ids as ``TOKEN_BYTES`` each (None: not
        known exactly, no KV block can be keyed)."""
        ...


def estimated_tokens(endpoint: Endpoint, body: Mapping[str, Any]) -> int:
    """``ceil(chars / 4)`` over the prompt, plus 4 per chat message (at least 1); a
    tokenized prompt counts its ids."""
    if endpoint is Endpoint.CHAT:
        messages = body.get("messages")
        if not isinstance(messages, list):
            return 1
        chars = sum(_chars(m.get("content")) for m in messages if isinstance(m, dict))
        return max(1, math.ceil(chars / CHARS_PER_TOKEN)) + CHAT_TOKENS_PER_MESSAGE * len(messages)
    field = "input" if endpoint is Endpoint.EMBEDDINGS else "prompt"
    return max(1, math.ceil(_chars(body.get(field)) / CHARS_PER_TOKEN))


def _chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        if value and all(isinstance(t, int) for t in value):
            return len(value) * CHARS_PER_TOKEN  # token ids
        return sum(_chars(v) for v in value)
    if isinstance(value, dict):  # chat content part
        return _chars(value.get("text", ""))
    return 0


class CharEstimate:
    """No tokenizer: the count from the prompt's size, no token ids."""

    source = ESTIMATE

    def read(self, endpoint: Endpoint, body: Mapping[str, Any]) -> tuple[int, bytes | None]:
        return estimated_tokens(endpoint, body), None


class SimulatorTokenizer:
    """The simulated servers' tokenizer (``engines.sim_tokens``): they count as the estimate
    does and key their KV blocks by this stream."""

    source = SIMULATOR

    def read(self, endpoint: Endpoint, body: Mapping[str, Any]) -> tuple[int, bytes | None]:
        if endpoint is Endpoint.CHAT:
            messages = body.get("messages")
            stream = chat_stream(messages) if isinstance(messages, list) else ""
        elif endpoint is Endpoint.COMPLETIONS:
            stream = completion_stream(body.get("prompt"))
        else:
            stream = ""
        return estimated_tokens(endpoint, body), stream_bytes(stream) if stream else None


class HfTokenizer:
    """A model's Hugging Face tokenizer from its directory (``tokenizer.json``, and the chat
    template of ``tokenizer_config.json``)."""

    def __init__(self, directory: Path) -> None:
        self.source = str(directory)
        path = directory / "tokenizer.json"
        try:
            self._tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # the library raises its own types for a bad file
            raise BalancerConfigError(f"tokenizer: cannot read {path}: {exc}") from None
        self._template, self._special = _chat_template(directory / "tokenizer_config.json")
        self._cache: OrderedDict[tuple[Endpoint, str], tuple[int, bytes]] = OrderedDict()

    def read(self, endpoint: Endpoint, body: Mapping[str, Any]) -> tuple[int, bytes | None]:
        text = self._text(endpoint, body)
        if text is None:
            prompt = body.get("prompt")
            if endpoint is Endpoint.COMPLETIONS and isinstance(prompt, list) and _is_ids(prompt):
                return len(prompt), ids_bytes(prompt)
            return estimated_tokens(endpoint, body), None
        key = (endpoint, text)
        if (hit := self._cache.get(key)) is not None:
            self._cache.move_to_end(key)
            return hit
        head, rest = text[:MAX_ENCODED_CHARS], text[MAX_ENCODED_CHARS:]
        ids = self._tokenizer.encode(head, add_special_tokens=endpoint is not Endpoint.CHAT).ids
        count = len(ids) + math.ceil(len(rest) / CHARS_PER_TOKEN)
        result = (max(1, count), ids_bytes(ids))
        self._cache[key] = result
        if len(self._cache) > CACHED_PROMPTS:
            self._cache.popitem(last=False)
        return result

    def _text(self, endpoint: Endpoint, body: Mapping[str, Any]) -> str | None:
        if endpoint is Endpoint.CHAT:
            messages = _plain_messages(body.get("messages"))
            if messages is None or self._template is None:
                return None
            try:
                return self._template.render(messages=messages, add_generation_prompt=True,
                                             **self._special)
            except Exception:  # a template that cannot render these messages: estimate
                return None
        field = "input" if endpoint is Endpoint.EMBEDDINGS else "prompt"
        value = body.get(field)
        if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
            value = value[0]
        return value if isinstance(value, str) else None


def _plain_messages(messages: Any) -> list[dict[str, str]] | None:
    """The messages with their content as text (content parts: their texts joined, as
    vLLM passes them to a template); None when one is not a message."""
    if not isinstance(messages, list):
        return None
    plain = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            return None
        content = message.get("content")
        if isinstance(content, list):
            texts = [p.get("text") for p in content if isinstance(p, dict)]
            if not all(isinstance(t, str) for t in texts):
                return None
            content = "".join(texts)  # type: ignore[arg-type]
        elif content is None:
            content = ""
        if not isinstance(content, str):
            return None
        plain.append({"role": message["role"], "content": content})
    return plain


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(
        type(t) is int and 0 <= t < 1 << 64 for t in value)


def _chat_template(path: Path) -> tuple[Any, dict[str, str]]:
    """The compiled chat template and the special tokens it reads (None: no template)."""
    if not path.exists():
        return None, {}
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BalancerConfigError(f"tokenizer: cannot read {path}: {exc}") from None
    source = config.get("chat_template")
    if isinstance(source, list):  # named templates: the default one
        source = next((t.get("template") for t in source
                       if isinstance(t, dict) and t.get("name") == "default"), None)
    if not isinstance(source, str):
        return None, {}
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    special = {name: _token_text(config.get(name)) for name in ("bos_token", "eos_token")}
    try:
        return env.from_string(source), special
    except Exception as exc:  # jinja2's TemplateSyntaxError and kin
        raise BalancerConfigError(f"tokenizer: the chat template of {path}: {exc}") from None


def _token_text(value: Any) -> str:
    if isinstance(value, dict):  # {"content": "<s>", ...}
        value = value.get("content")
    return value if isinstance(value, str) else ""


def load_tokenizer(spec: str | None) -> PromptTokenizer:
    """The tokenizer a server's ``tokenizer`` names (None: the estimate)."""
    if spec is None or spec == ESTIMATE:
        return CharEstimate()
    if spec == SIMULATOR:
        return SimulatorTokenizer()
    directory = Path(spec)
    if not (directory / "tokenizer.json").is_file():
        raise BalancerConfigError(f"tokenizer: no tokenizer.json in {spec!r}")
    return HfTokenizer(directory)


class Tokenizers:
    """Model -> tokenizer, from the servers' ``tokenizer`` names; the estimate for a model
    no server names one for."""

    def __init__(self, by_model: Mapping[str, PromptTokenizer]) -> None:
        self._by_model = dict(by_model)
        self._estimate = CharEstimate()

    @classmethod
    def of_backends(cls, backends: Iterable[Any]) -> Tokenizers:
        """From ``BackendSpec``s; ``BalancerConfigError`` when two servers of one model
        name different tokenizers, or one cannot be loaded."""
        named: dict[str, str] = {}
        for spec in backends:
            if spec.tokenizer is None:
                continue
            for model in spec.models:
                if named.setdefault(model, spec.tokenizer) != spec.tokenizer:
                    raise BalancerConfigError(
                        f"backend {spec.name}: tokenizer {spec.tokenizer!r} for {model}, "
                        f"another server of it names {named[model]!r}")
        loaded: dict[str, PromptTokenizer] = {}
        for spec_text in set(named.values()):
            tokenizer = load_tokenizer(spec_text)
            loaded.update({m: tokenizer for m, s in named.items() if s == spec_text})
        return cls(loaded)

    def of(self, model: str) -> PromptTokenizer:
        return self._by_model.get(model, self._estimate)
