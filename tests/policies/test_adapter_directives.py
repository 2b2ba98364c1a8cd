# SPDX-License-Identifier: Apache-2.0
"""``adapter`` in a region and ``adapter-slots`` on a gpu: what compiles, what is refused."""

from __future__ import annotations

import pytest

from policies import load_policy_text
from policies.errors import PolicyError
from policies.model import Adapter

REGION = """
zone infer.example.com {{ ns ns1.infer.example.com 127.0.0.1 }}
region r1 {{
    location 38.9 -77.0; jurisdiction US; endpoints 127.0.1.1; capacity 10rps
    gpu g0 {{ url http://127.0.0.1:9000; models llama-8b; adapter-slots 8 }}
    {adapters}
}}
service chat.infer.example.com {{ all-down answer-nothing }}
"""


def region(adapters: str):
    return load_policy_text(REGION.format(adapters=adapters)).region("r1")


def test_adapters_and_slots_compile() -> None:
    r = region("adapter sql base llama-8b path /adapters/sql-v3\n"
               "adapter support base llama-8b path org/support-lora")
    assert r.adapters == (Adapter("sql", "llama-8b", "/adapters/sql-v3"),
                          Adapter("support", "llama-8b", "org/support-lora"))
    assert r.gpus[0].adapter_slots == 8


@pytest.mark.parametrize(("line", "message"), [
    ("adapter sql base other-model path /a", "no gpu of this region serves its base model"),
    ("adapter llama-8b base llama-8b path /a", "serves a model of that name"),
    ("adapter sql base llama-8b path /a\nadapter sql base llama-8b path /b",
     "declared twice"),
    ("adapter sql llama-8b path /a", "expected 'base'"),
    ("adapter sql base llama-8b", "adapter <name> base <model> path <path>"),
    ("adapter sql base llama-8b path /a extra", "unexpected argument"),
], ids=["unknown-base", "name-of-a-model", "twice", "no-base-keyword", "no-path", "extra"])
def test_bad_adapters_are_refused_with_a_clear_error(line: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        region(line)


def test_adapter_slots_must_be_a_positive_count() -> None:
    with pytest.raises(PolicyError, match="adapter-slots"):
        load_policy_text(REGION.format(adapters="").replace("adapter-slots 8",
                                                            "adapter-slots 0"))
