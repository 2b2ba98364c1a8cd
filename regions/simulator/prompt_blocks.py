# SPDX-License-Identifier: Apache-2.0
"""The chained hashes of a prompt's KV blocks, over the simulator's tokens
(``engines.sim_tokens``).

Blocks are ``block_size`` consecutive tokens, hashed as vLLM's automatic prefix caching
hashes them (``vllm/v1/core/kv_cache_utils.py``, ``hash_block_tokens``): each block's hash
covers its parent's hash and its own tokens, so a hash names the whole prefix up to that
block; only full blocks are hashed. As in vLLM, the chain starts from a per-process random
seed (vLLM's ``NONE_HASH`` is random unless ``PYTHONHASHSEED`` is set), so two servers hash
the same prefix differently and a router cannot rely on the hash values themselves: it
reads the token ids that the KV events carry.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

from engines.sim_tokens import TOKEN_BYTES, chat_stream, stream_bytes, token_ids

__all__ = ["PromptBlocks", "chat_stream", "prompt_blocks"]

_SEED = os.urandom(8)


@dataclass(frozen=True)
class PromptBlocks:
    """A prompt's tokens (``stream_bytes``) and its full blocks' chained hashes."""

    data: bytes
    block_size: int
    hashes: tuple[int, ...]

    def token_ids(self, first: int, end: int) -> list[int]:
        """The token ids of blocks ``first`` to ``end`` (excluded), for a ``BlockStored``
        event."""
        width = self.block_size * TOKEN_BYTES
        return token_ids(self.data[first * width:end * width])


def prompt_blocks(stream: str, block_size: int, seed: bytes = _SEED) -> PromptBlocks:
    """Hash every full ``block_size``-token block of ``stream``, chained from ``seed``."""
    data = stream_bytes(stream)
    width = block_size * TOKEN_BYTES
    hashes: list[int] = []
    parent = seed
    for start in range(0, len(data) - width + 1, width):
        digest = hashlib.blake2b(data[start:start + width], digest_size=8, key=parent).digest()
        hashes.append(int.from_bytes(digest, "big"))
        parent = digest
    return PromptBlocks(data, block_size, tuple(hashes))
