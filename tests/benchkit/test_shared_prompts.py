# SPDX-License-Identifier: Apache-2.0
"""Shared-prefix prompts: each hash id is the same 2,048 characters everywhere, a prompt is
exactly its token count in the simulator's tokenizer, and requests with a common hash-id
prefix send a common text (and chat message) prefix."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchkit.routing_client import body, prepare
from benchkit.routing_trace import Arrival
from benchkit.shared_prompts import (
    BLOCK_CHARS,
    block_text,
    chat_messages,
    chat_tokens,
    prompt_text,
)

ROOT = Path(__file__).resolve().parents[2]


def test_a_block_is_2048_ascii_word_characters_seeded_by_its_id() -> None:
    text = block_text(7)
    assert len(text) == BLOCK_CHARS and text.isascii()
    assert len(text.split()) > 200  # word-like, not one run of characters
    assert block_text(7) == text and block_text(8) != text


def test_a_block_is_the_same_in_another_process() -> None:
    code = "from benchkit.shared_prompts import block_text; print(block_text(123456))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True, env={"PYTHONHASHSEED": "7"}).stdout
    assert out.rstrip("\n") == block_text(123456)


@pytest.mark.parametrize("tokens", [1, 511, 512, 513, 6758, 7168], ids=lambda t: f"{t}tok")
def test_the_prompt_has_exactly_the_tokens_asked(tokens: int) -> None:
    text = prompt_text(range(14), tokens)
    assert math.ceil(len(text) / 4) == tokens and len(text) == 4 * tokens


def test_a_prompt_longer_than_its_blocks_is_refused() -> None:
    with pytest.raises(ValueError, match="need 3 blocks"):
        prompt_text([1, 2], 1025)


def test_equal_hash_id_prefixes_give_byte_identical_text_prefixes() -> None:
    first = prompt_text([0, 14, 15, 16], 1800)
    later = prompt_text([0, 14, 15, 16, 17, 18], 2900)  # the conversation's next turn
    other = prompt_text([0, 28, 29], 1500)
    assert later[:3 * BLOCK_CHARS] == first[:3 * BLOCK_CHARS]
    assert other[:BLOCK_CHARS] == first[:BLOCK_CHARS]  # the shared system prompt
    assert other[BLOCK_CHARS:BLOCK_CHARS + 64] != first[BLOCK_CHARS:BLOCK_CHARS + 64]


@pytest.mark.parametrize(("blocks", "tokens", "count"), [
    (14, 6758, 14),  # even: one message per block, the last one cut
    (13, 6400, 12),  # odd: the last block joins the closing user message
    (2, 600, 2),
    (3, 1030, 2),  # 3 blocks, but the template tokens leave the third nothing: 2 messages
    (2, 515, 1),  # too short for a system and a user message
    (1, 300, 1),
], ids=["even", "odd", "two", "template-shrinks", "one-user", "one-block"])
def test_chat_is_exact_and_split_one_message_per_block(blocks: int, tokens: int,
                                                       count: int) -> None:
    messages = chat_messages(range(blocks), tokens)
    assert len(messages) == count
    assert chat_tokens(messages) == tokens
    roles = [m["role"] for m in messages]
    assert roles[-1] == "user"
    if count > 1:
        assert roles[0] == "system"
        assert roles[1:] == ["user", "assistant"] * ((count - 2) // 2) + ["user"]
        assert all(len(m["content"]) == BLOCK_CHARS for m in messages[:-1])
    assert all(len(m["content"]) % 4 == 0 for m in messages)
    joined = "".join(m["content"] for m in messages)
    assert joined == prompt_text(range(blocks), tokens - 4 * count)


def test_chat_requests_with_a_common_block_prefix_share_their_first_messages() -> None:
    turn = chat_messages([0, 14, 15, 16, 17], 2300)
    next_turn = chat_messages([0, 14, 15, 16, 17, 18, 19, 20], 3900)
    assert len(turn) == 4 and len(next_turn) == 8
    assert next_turn[:3] == turn[:3]
    assert next_turn[3]["content"] == turn[3]["content"][:BLOCK_CHARS]
    stranger = chat_messages([0, 28, 29, 30], 1900)
    assert stranger[0] == turn[0] and stranger[1] != turn[1]


def test_shared_bodies_carry_the_text_and_not_the_count() -> None:
    a = Arrival(0.0, 1500, 40, (0, 14, 15))
    completion = body(a, 2048, "shared", "completions")
    assert completion["prompt"] == prompt_text(a.hash_ids, 1500)
    assert "x_prompt_tokens" not in completion and completion["x_output_tokens"] == 40
    chat = body(a, None, "shared", "chat")
    assert chat_tokens(chat["messages"]) == 1500 and chat["max_tokens"] == 40
    assert body(a) == {"model": "sim-model", "prompt": "x", "max_tokens": 1000,
                       "stream": True, "x_prompt_tokens": 1500, "x_output_tokens": 40}


def test_prepared_requests_are_serialised_with_optional_session_keys() -> None:
    arrivals = [Arrival(0.0, 1500, 40, (0, 14, 15)), Arrival(1.0, 900, 10, (0, 28))]
    plain, chat = prepare(arrivals, 2048, "shared"), prepare(arrivals, 2048, "shared", "chat",
                                                              sessions=True)
    assert json.loads(plain[0].body)["prompt"] == prompt_text((0, 14, 15), 1500)
    assert plain[0].headers == () and not plain[0].chat
    assert dict(chat[1].headers) == {"x-director-session": "28", "X-SMG-Routing-Key": "28"}
    assert chat[1].chat and 30_000 > len(plain[0].body) > 6000
