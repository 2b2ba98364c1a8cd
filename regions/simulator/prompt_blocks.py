# SPDX-License-Identifier: Apache-2.0
"""The simulator's tokenizer and the chained hashes of a prompt's KV blocks.

The tokenizer is fixed and deliberately simple: a prompt's token stream is its text cut
into 4-character tokens (the last one may be shorter), which is what ``openai_format``
counts (``ceil(chars / 4)``). A chat request's stream is, per message, a 16-character
template marker naming the role (the 4 template tokens ``openai_format`` counts) followed by
the message's content, so a conversation that grows by whole messages keeps its earlier
stream as a prefix, as a real chat template does.

Blocks are ``block_size`` consecutive tokens, hashed as vLLM's automatic prefix caching
hashes them (``vllm/v1/core/kv_cache_utils.py``, ``hash_block_tokens``): each block's hash
covers its parent's hash and its own tokens, so a hash names the whole prefix up to that
block; only full blocks are hashed. As in vLLM, the chain starts from a per-process random
seed (vLLM's ``NONE_HASH`` is random unless ``PYTHONHASHSEED`` is set), so two servers hash
the same prefix differently and a router cannot rely on the hash values themselves. Token
ids (for the KV events a server publishes) are a 31-bit CRC of each token's text.
"""

from __future__ import annotations

import hashlib
import os
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

CHARS_PER_TOKEN = 4
TEMPLATE_CHARS = 16  # 4 template tokens per chat message
_SEED = os.urandom(8)


@dataclass(frozen=True)
class PromptBlocks:
    """A prompt's token stream (as text, 4 characters per token) and its full blocks'
    chained hashes."""

    stream: str
    block_size: int
    hashes: tuple[int, ...]

    def token_ids(self, block: int) -> list[int]:
        """The token ids of block ``block`` (for a ``BlockStored`` event)."""
        width = self.block_size * CHARS_PER_TOKEN
        text = self.stream[block * width:(block + 1) * width]
        return [zlib.crc32(text[i:i + CHARS_PER_TOKEN].encode()) & 0x7FFFFFFF
                for i in range(0, len(text), CHARS_PER_TOKEN)]


def chat_stream(messages: Sequence[Any]) -> str:
    """The token stream of a chat request's messages (already validated by the parser)."""
    parts: list[str] = []
    for message in messages:
        role = str(message.get("role", ""))
        parts.append(f"<|{role[:11]}|>".ljust(TEMPLATE_CHARS, "\n"))
        content = message.get("content") or ""
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(content)
    return "".join(parts)


def prompt_blocks(stream: str, block_size: int, seed: bytes = _SEED) -> PromptBlocks:
    """Hash every full ``block_size``-token block of ``stream``, chained from ``seed``."""
    width = block_size * CHARS_PER_TOKEN
    full = len(stream) // width
    hashes: list[int] = []
    parent = seed
    for i in range(full):
        digest = hashlib.blake2b(stream[i * width:(i + 1) * width].encode(), digest_size=8,
                                 key=parent).digest()
        hashes.append(int.from_bytes(digest, "big"))
        parent = digest
    return PromptBlocks(stream, block_size, tuple(hashes))
