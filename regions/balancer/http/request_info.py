# SPDX-License-Identifier: Apache-2.0
"""Parse an OpenAI request body once into the ``RequestInfo`` the pipeline reads.

- prompt tokens: as the model's tokenizer counts them (``tokenizers``; without one,
  ``ceil(chars / 4)`` over the prompt, chat: message contents, plus 4 per message;
  embeddings: the inputs; a tokenized prompt counts its ids). The non-standard
  ``x_prompt_tokens`` body field (the simulator's exact count) may raise the estimate,
  never lower it: the count is what a tenant's input-token quota is charged at admission,
  and a client's word must not make a 4 MB prompt one token (the engine's ``usage``
  settles the charge when the request ends, ``tenant_quota``);
- output tokens: the learned prediction for the model, prompt size and ``max_tokens``
  (``max_completion_tokens`` for chat) when there is one (``output_lengths``), at most
  ``max_tokens``; else ``max_tokens``; else the OpenAI default (16 for completions, 256 for
  chat); 0 for embeddings;
- ``cost_tokens = prompt_tokens / prefill_ratio + output_tokens``;
- priority: header ``x-director-priority`` (integer, higher first, clamped to ±1000);
- session: header ``x-director-session``, else the body's ``user``;
- prefix: chained hashes of the prompt's leading blocks, for the ``prefix-affinity``
  scorer. A block is ``PREFIX_BLOCK_CHARS`` = 64 characters, about 16 tokens, the KV block
  of vLLM on CUDA (a tokenized prompt: ``PREFIX_BLOCK_IDS`` = 16 ids), of the prompt, or of
  the chat messages joined as role, U+001F, content, U+001E; only whole blocks count, at
  most ``MAX_PREFIX_BLOCKS`` = 1,024 (64 KiB of text, about 16,000 tokens; about 0.2 ms to
  hash). Multi-turn conversations differ only after many blocks, so the whole prompt
  counts, not its first few kilobytes. ``h_0 = hash((model, block_0))``,
  ``h_i = hash((h_{i-1}, block_i))``, so ``h_i`` names the whole prefix up to block ``i``
  for that model. Python's ``hash``: values are per process, never stored or sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from regions.balancer.errors import RequestRejected
from regions.balancer.http.tokenizers import CharEstimate, PromptTokenizer
from regions.balancer.scheduling.kv_event_index import token_keys
from regions.balancer.scheduling.output_lengths import OutputLengths
from regions.balancer.scheduling.prefix_blocks import (
    MAX_PREFIX_BLOCKS,
    PREFIX_BLOCK_CHARS,
    PREFIX_BLOCK_IDS,
)
from regions.balancer.types import Endpoint, RequestInfo

ESTIMATE = CharEstimate()
DEFAULT_OUTPUT = {Endpoint.COMPLETIONS: 16, Endpoint.CHAT: 256, Endpoint.EMBEDDINGS: 0}
PRIORITY_HEADER = "x-director-priority"
SESSION_HEADER = "x-director-session"
MAX_PRIORITY = 1000


def prompt_tokens(endpoint: Endpoint, body: Mapping[str, Any],
                  tokenizer: PromptTokenizer) -> tuple[int, bytes | None]:
    """The prompt's tokens as ``tokenizer`` counts them, or as the client declares them in
    ``x_prompt_tokens`` when that is more; and its token ids, when known."""
    count, ids = tokenizer.read(endpoint, body)
    declared = body.get("x_prompt_tokens")
    if isinstance(declared, int) and not isinstance(declared, bool):
        return max(declared, count), ids
    return count, ids


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: their text, else their type
        return "".join(
            str(p.get("text") or p.get("type") or "") if isinstance(p, dict) else str(p)
            for p in content
        )
    return ""


def _prompt_for_prefix(endpoint: Endpoint, body: Mapping[str, Any]) -> str | list[int]:
    """The leading text (or token ids) the prefix blocks are cut from, at most the bound."""
    bound = PREFIX_BLOCK_CHARS * MAX_PREFIX_BLOCKS
    if endpoint is Endpoint.CHAT:
        messages = body.get("messages")
        if not isinstance(messages, list):
            return ""
        parts: list[str] = []
        size = 0
        for m in messages:
            if not isinstance(m, dict):
                continue
            part = f"{m.get('role', '')}\x1f{_content_text(m.get('content'))}\x1e"
            parts.append(part)
            size += len(part)
            if size >= bound:
                break
        return "".join(parts)[:bound]
    if endpoint is not Endpoint.COMPLETIONS:
        return ""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt[:bound]
    if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
        return prompt[: PREFIX_BLOCK_IDS * MAX_PREFIX_BLOCKS]
    return ""


def prefix_hashes(endpoint: Endpoint, body: Mapping[str, Any], model: str) -> tuple[int, ...]:
    """Chained hashes of the prompt's whole leading blocks (see the module docstring)."""
    prompt = _prompt_for_prefix(endpoint, body)
    size = PREFIX_BLOCK_CHARS if isinstance(prompt, str) else PREFIX_BLOCK_IDS
    hashes: list[int] = []
    h: Any = model
    for start in range(0, len(prompt) - size + 1, size):
        block = prompt[start : start + size]
        h = hash((h, block if isinstance(block, str) else tuple(block)))
        hashes.append(h)
    return tuple(hashes)


def _opt_positive_int(body: Mapping[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RequestRejected(400, f"{key} must be an integer >= 1, got {value!r}", key)
    return value


def host_name(host: str | None) -> str:
    """The name a request's Host header asks for (no port, lower case, no final dot): a
    service's name when the client addressed it by name."""
    return (host or "").rsplit(":", 1)[0].lower().rstrip(".")


def _priority(headers: Mapping[str, str]) -> int:
    raw = headers.get(PRIORITY_HEADER)
    if raw is None:
        return 0
    try:
        value = int(raw.strip())
    except ValueError:
        raise RequestRejected(400, f"{PRIORITY_HEADER}: expected an integer, got {raw!r}") from None
    return max(-MAX_PRIORITY, min(MAX_PRIORITY, value))


def parse_request(
    endpoint: Endpoint,
    body: Any,
    headers: Mapping[str, str],
    *,
    prefill_ratio: float,
    lengths: OutputLengths | None = None,
    with_prefix: bool = True,
    token_block_size: int | None = None,
    tokenizer: PromptTokenizer | None = None,
) -> RequestInfo:
    """Build the ``RequestInfo``; raise ``RequestRejected`` (400) on a malformed body.
    ``lengths``: what was learned of answer lengths (None: take ``max_tokens`` as it is).
    ``with_prefix=False`` skips the prefix hashes (no scorer of the profile reads them);
    ``token_block_size`` also keys the prompt's token blocks of that size, for the KV-event
    index (``kv_event_index.token_keys``), when ``tokenizer`` knows its token ids."""
    if not isinstance(body, dict):
        raise RequestRejected(400, "request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestRejected(400, "you must provide a model parameter", "model")
    prompt, ids = prompt_tokens(endpoint, body, tokenizer or ESTIMATE)
    max_tokens = None
    if endpoint is Endpoint.CHAT:
        max_tokens = _opt_positive_int(body, "max_completion_tokens") or _opt_positive_int(
            body, "max_tokens"
        )
    elif endpoint is Endpoint.COMPLETIONS:
        max_tokens = _opt_positive_int(body, "max_tokens")
    if endpoint is Endpoint.EMBEDDINGS:
        output = 0.0
    else:  # a learned prediction is a share of max_tokens when there is one: never above it
        learned = None if lengths is None else lengths.predict(model, prompt, max_tokens)
        if learned is None:
            learned = max_tokens if max_tokens is not None else DEFAULT_OUTPUT[endpoint]
        output = float(learned)
    user = body.get("user") if isinstance(body.get("user"), str) else None
    return RequestInfo(
        endpoint=endpoint,
        model=model,
        prompt_tokens=prompt,
        max_tokens=max_tokens,
        output_tokens=output,
        cost_tokens=prompt / prefill_ratio + output,
        stream=bool(body.get("stream", False)),
        priority=_priority(headers),
        session=headers.get(SESSION_HEADER) or user,
        user=user,
        prefix=prefix_hashes(endpoint, body, model) if with_prefix else (),
        token_prefix=(token_keys(ids, token_block_size, MAX_PREFIX_BLOCKS)
                      if token_block_size and ids else ()),
    )
