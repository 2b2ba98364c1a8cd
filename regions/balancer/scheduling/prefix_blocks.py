# SPDX-License-Identifier: Apache-2.0
"""The blocks a prompt's prefix is cut into for the prefix-affinity scorer: 64 characters
of text (about 16 tokens at 4 characters a token: the KV block of vLLM on CUDA) or 16 ids
of a tokenized prompt, at most 1,024 blocks."""

from __future__ import annotations

CHARS_PER_TOKEN = 4
PREFIX_BLOCK_CHARS = 64
PREFIX_BLOCK_IDS = PREFIX_BLOCK_CHARS // CHARS_PER_TOKEN
MAX_PREFIX_BLOCKS = 1024
