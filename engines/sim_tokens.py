# SPDX-License-Identifier: Apache-2.0
"""The tokenizer of the simulated GPU servers, shared by the simulator (which hashes KV
blocks with it) and the balancer (which must cut a prompt into the same blocks to read
the servers' KV events).

A prompt's token stream is its text (a chat request: per message, a 16-character template
marker naming the role, then the content); each token is 4 characters of it, the last one
possibly shorter, which is the count ``ceil(chars / 4)`` (plus 4 per chat message) that the
simulator and the balancer both use. A token's id is its 4 characters in UTF-16 (little
endian) read as one unsigned 64-bit integer, so a stream's tokens are its UTF-16 bytes cut
every 8 bytes (``TOKEN_BYTES``): tokenizing is one encode, no Python loop per token. A real
vLLM server would need its model's tokenizer and chat template instead.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

CHARS_PER_TOKEN = 4
TOKEN_BYTES = 8
TEMPLATE_CHARS = 16  # 4 template tokens per chat message


def chat_stream(messages: Sequence[Any]) -> str:
    """The token stream of a chat request's messages (role markers and contents)."""
    parts: list[str] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = str(message.get("role", ""))
        parts.append(f"<|{role[:11]}|>".ljust(TEMPLATE_CHARS, "\n"))
        content = message.get("content") or ""
        if isinstance(content, list):  # content parts
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(content if isinstance(content, str) else "")
    return "".join(parts)


def completion_stream(prompt: Any) -> str:
    """The token stream of a completion's ``prompt``: its text (or its single text), or
    4 characters per token id of a tokenized prompt; "" for anything else."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(type(t) is int for t in prompt):
        return "".join((t & 0xFFFFFFFF).to_bytes(4, "big").decode("latin-1") for t in prompt)
    return ""


def stream_bytes(stream: str) -> bytes:
    """A token stream's tokens as bytes, ``TOKEN_BYTES`` per token (the last zero-padded)."""
    data = stream.encode("utf-16-le", "surrogatepass")
    tail = len(data) % TOKEN_BYTES
    return data + b"\0" * (TOKEN_BYTES - tail) if tail else data


def token_ids(data: bytes) -> list[int]:
    """The token ids of ``data`` (a slice of ``stream_bytes`` on token boundaries)."""
    ids = array("Q")
    ids.frombytes(data)
    return ids.tolist()


def ids_bytes(ids: Sequence[int]) -> bytes:
    """The bytes of token ids (the inverse of ``token_ids``); ``ValueError`` on ids that
    are not unsigned 64-bit integers."""
    try:
        return array("Q", ids).tobytes()
    except (OverflowError, TypeError) as exc:
        raise ValueError(f"token ids must be unsigned 64-bit integers: {exc}") from None
