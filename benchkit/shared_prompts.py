# SPDX-License-Identifier: Apache-2.0
"""Prompt text for a trace request's ``hash_ids`` (Mooncake FAST'25), so that requests the
trace says share a prefix send byte-identical text prefixes and a prefix cache can hit.

Each hash id stands for one 512-token block of the prompt (``BLOCK_TOKENS``); equal ids are
identical blocks. In the simulator's tokenizer a token is 4 characters (``ceil(chars / 4)``),
so a block is ``BLOCK_CHARS`` = 2,048 ASCII characters: ``block_text(id)`` makes them, word-like
and seeded by the id alone (the same text in every process and run), cached.

- ``prompt_text(hash_ids, tokens)``: the blocks concatenated, the last one cut so that the
  prompt is exactly ``tokens`` tokens (4 x ``tokens`` characters). The trace's input length
  is at most 512 x ``len(hash_ids)`` (the last block is partial), and the replay may cap it
  further to fit the context: blocks past the length are not used.
- ``chat_messages(hash_ids, tokens)``: a multi-turn conversation, exactly ``tokens`` tokens
  with the simulator's 4 template tokens per message. Split rule: message ``i`` holds block
  ``i`` (roles ``system``, then ``user`` and ``assistant`` in turn), except the last message,
  a ``user`` one, which holds the rest (one block and a part, or a part). The message count
  is therefore even: the number of blocks the prompt spans, less one when that is odd (the
  last block then joins the previous one in the closing user message), less two more while
  the template tokens leave the last message nothing. Every Mooncake request starts with
  block 0, a 512-token system prompt, so it is the system message. Two requests with a
  common hash-id prefix of ``k`` blocks have their first ``min(k, m1 - 1, m2 - 1)`` messages
  in common (same role, same text), and the text of their contents agrees on the whole
  ``k``-block prefix. Each content is a multiple of 4 characters, so the count is exact
  however the contents are tokenised (apart or joined). A prompt too short for a system and
  a user message (at most 520 tokens over two blocks) is one user message.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Sequence

BLOCK_TOKENS = 512  # Mooncake: tokens per hash id
CHARS_PER_TOKEN = 4  # the simulator's tokenizer
BLOCK_CHARS = BLOCK_TOKENS * CHARS_PER_TOKEN
TEMPLATE_TOKENS = 4  # the simulator's chat template, per message
ROLES = ("user", "assistant")

_WORDS = (
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "model", "token", "cache",
    "prefix", "block", "request", "server", "latency", "query", "answer", "question", "context",
    "window", "batch", "queue", "route", "region", "policy", "engine", "memory", "stream",
    "prompt", "system", "user", "reply", "turn", "data", "table", "index", "value", "result",
    "error", "report", "trace", "time", "first", "last", "next", "other", "each", "many",
    "some", "most", "such", "only", "also", "very", "just", "then", "than", "into", "over",
    "after", "before", "under", "between", "through", "during", "without", "within", "about",
    "against", "among",
)


@functools.lru_cache(maxsize=1 << 16)
def block_text(hash_id: int) -> str:
    """The 2,048 characters of block ``hash_id``: lowercase words, spaces and a full stop now
    and then, the same for the same id everywhere."""
    rng = random.Random(hash_id)
    words = rng.choices(_WORDS, k=BLOCK_CHARS // 2)  # 3+ characters each with the space
    parts: list[str] = []
    size = 0
    for i, word in enumerate(words):
        piece = f"{word}. " if i % 13 == 12 else f"{word} "
        parts.append(piece)
        size += len(piece)
        if size >= BLOCK_CHARS:
            break
    return "".join(parts)[:BLOCK_CHARS]


def prompt_text(hash_ids: Sequence[int], tokens: int) -> str:
    """The prompt of ``tokens`` tokens made of the blocks ``hash_ids``, the last one cut."""
    if tokens < 1:
        raise ValueError(f"prompt_text: tokens must be at least 1, got {tokens}")
    chars = tokens * CHARS_PER_TOKEN
    need = math.ceil(chars / BLOCK_CHARS)
    if need > len(hash_ids):
        raise ValueError(f"prompt_text: {tokens} tokens need {need} blocks, the request has "
                         f"{len(hash_ids)} hash ids")
    return "".join(block_text(h) for h in hash_ids[:need])[:chars]


def chat_messages(hash_ids: Sequence[int], tokens: int) -> list[dict[str, str]]:
    """The conversation of ``tokens`` tokens (template tokens included) made of the blocks
    ``hash_ids``: see the module docstring for the split."""
    spanned = min(len(hash_ids), math.ceil(tokens / BLOCK_TOKENS))
    count = spanned - spanned % 2
    while count >= 2 and tokens - TEMPLATE_TOKENS * count <= BLOCK_TOKENS * (count - 1):
        count -= 2
    if count < 2:
        if tokens <= TEMPLATE_TOKENS:
            raise ValueError(f"chat_messages: {tokens} tokens leave no content after the "
                             f"{TEMPLATE_TOKENS} template tokens")
        return [{"role": "user", "content": prompt_text(hash_ids, tokens - TEMPLATE_TOKENS)}]
    text = prompt_text(hash_ids, tokens - TEMPLATE_TOKENS * count)
    messages = [{"role": "system", "content": text[:BLOCK_CHARS]}]
    for i in range(1, count):
        last = i == count - 1
        content = text[i * BLOCK_CHARS:] if last else text[i * BLOCK_CHARS:(i + 1) * BLOCK_CHARS]
        messages.append({"role": ROLES[(i - 1) % 2], "content": content})
    return messages


def chat_tokens(messages: Sequence[dict[str, str]]) -> int:
    """The simulator's count for ``messages``: 4 template tokens each plus the content."""
    chars = sum(len(m["content"]) for m in messages)
    return TEMPLATE_TOKENS * len(messages) + math.ceil(chars / CHARS_PER_TOKEN)
