# SPDX-License-Identifier: Apache-2.0
"""The balancer reads prompts with the served model's tokenizer: a Hugging Face
``tokenizer.json`` from the directory the policy names (``files/tokenizers/tiny-bpe``, a
small BPE trained with the ``tokenizers`` library, in a model repository's layout), the
simulator's rule for the simulator only, and an estimate otherwise, said in ``explain``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from engines.kv_events import BlockStored
from engines.sim_tokens import ids_bytes, stream_bytes
from policies import load_policy_text
from policies.errors import PolicyError
from regions.balancer import BackendSpec, build_balancer
from regions.balancer.errors import BalancerConfigError
from regions.balancer.http.request_info import parse_request
from regions.balancer.http.tokenizers import (
    CharEstimate,
    HfTokenizer,
    SimulatorTokenizer,
    Tokenizers,
    load_tokenizer,
)
from regions.balancer.scheduling.kv_event_index import KvEventIndex, token_keys
from regions.balancer.types import Endpoint

TINY = Path(__file__).resolve().parent / "files" / "tokenizers" / "tiny-bpe"
PROMPT = "The balancer reads prompts with the model's own tokenizer. " * 20
MESSAGES = [{"role": "system", "content": "You answer briefly."},
            {"role": "user", "content": "Which region serves the EU?"}]


def reference() -> Tokenizer:
    return Tokenizer.from_file(str(TINY / "tokenizer.json"))


def test_a_completion_counts_and_keys_as_the_model_tokenizes_it() -> None:
    ids = reference().encode(PROMPT).ids
    count, data = HfTokenizer(TINY).read(Endpoint.COMPLETIONS, {"prompt": PROMPT})
    assert count == len(ids) != CharEstimate().read(Endpoint.COMPLETIONS, {"prompt": PROMPT})[0]
    assert data == ids_bytes(ids)


def test_a_chat_is_counted_through_the_models_chat_template() -> None:
    rendered = ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                "You answer briefly.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
                "Which region serves the EU?<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n")
    ids = reference().encode(rendered, add_special_tokens=False).ids
    count, data = HfTokenizer(TINY).read(Endpoint.CHAT, {"messages": MESSAGES})
    assert (count, data) == (len(ids), ids_bytes(ids))
    assert ids[0] == reference().token_to_id("<|begin_of_text|>")  # specials are one token


def test_a_tokenized_prompt_is_its_ids_and_a_chat_the_template_cannot_render_is_estimated(
        ) -> None:
    tokenizer = HfTokenizer(TINY)
    assert tokenizer.read(Endpoint.COMPLETIONS, {"prompt": [5, 6, 7]}) == (3, ids_bytes([5, 6, 7]))
    odd = {"messages": [{"role": "user", "content": {"not": "a string"}}]}
    assert tokenizer.read(Endpoint.CHAT, odd)[1] is None


def test_the_servers_stored_blocks_match_the_prompt_read_with_the_same_tokenizer() -> None:
    """What the KV-event index is for: a vLLM server running this model publishes the
    blocks it stored (their token ids); the balancer keys a new request's prompt with the
    same tokenizer and finds them. Read as 4-character tokens, it finds nothing."""
    ids = reference().encode(PROMPT).ids
    index = KvEventIndex()
    parent = None
    for n, start in enumerate(range(0, len(ids) - 15, 16)):
        index.apply("gpu0", [BlockStored((1000 + n,), parent, tuple(ids[start:start + 16]), 16)])
        parent = 1000 + n
    index.resume("gpu0")
    body = {"model": "m", "prompt": PROMPT + "and a question at the end"}
    read = parse_request(Endpoint.COMPLETIONS, body, {}, prefill_ratio=100.0,
                         token_block_size=16, tokenizer=HfTokenizer(TINY))
    assert index.match(read.token_prefix)["gpu0"] == len(ids) // 16
    by_characters = token_keys(stream_bytes(PROMPT), 16, 1024)
    assert index.match(by_characters).get("gpu0", 0) == 0


def test_without_a_tokenizer_the_count_is_estimated_and_no_block_is_keyed() -> None:
    body = {"model": "m", "prompt": PROMPT}
    read = parse_request(Endpoint.COMPLETIONS, body, {}, prefill_ratio=100.0,
                         token_block_size=16)
    assert read.prompt_tokens == len(PROMPT) // 4 and read.token_prefix == ()
    simulated = parse_request(Endpoint.COMPLETIONS, body, {}, prefill_ratio=100.0,
                              token_block_size=16, tokenizer=SimulatorTokenizer())
    assert simulated.prompt_tokens == read.prompt_tokens
    assert simulated.token_prefix == token_keys(stream_bytes(PROMPT), 16, 1024)


def test_explain_says_what_counted_the_tokens() -> None:
    backends = [BackendSpec("a", "http://127.0.0.1:1", ("tokenized",), tokenizer=str(TINY)),
                BackendSpec("b", "http://127.0.0.1:2", ("other",))]
    balancer = build_balancer("r", backends)
    told = balancer.explain("/v1/completions", {"model": "tokenized", "prompt": PROMPT})
    assert told["request"]["tokens_by"] == str(TINY)
    assert told["request"]["prompt_tokens"] == len(reference().encode(PROMPT).ids)
    told = balancer.explain("/v1/completions", {"model": "other", "prompt": PROMPT})
    assert told["request"]["tokens_by"] == "estimate"


def test_servers_of_one_model_must_agree_and_a_tokenizer_must_load(tmp_path: Path) -> None:
    a = BackendSpec("a", "http://127.0.0.1:1", ("m",), tokenizer=str(TINY))
    b = BackendSpec("b", "http://127.0.0.1:2", ("m",), tokenizer="simulator")
    with pytest.raises(BalancerConfigError, match="another server of it names"):
        Tokenizers.of_backends([a, b])
    assert Tokenizers.of_backends([a, BackendSpec("c", "http://127.0.0.1:3", ("m",))]).of(
        "m").source == str(TINY)
    with pytest.raises(BalancerConfigError, match=r"no tokenizer\.json"):
        load_tokenizer(str(tmp_path))
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(BalancerConfigError, match="cannot read"):
        load_tokenizer(str(tmp_path))
    broken = tmp_path / "broken-template"
    shutil.copytree(TINY, broken)
    config = json.loads((broken / "tokenizer_config.json").read_text())
    (broken / "tokenizer_config.json").write_text(
        json.dumps({**config, "chat_template": "{% for m in messages %}"}))
    with pytest.raises(BalancerConfigError, match="chat template"):
        load_tokenizer(str(broken))


GPU = """
zone infer.example.com {{ ns ns1.infer.example.com 127.0.0.1 }}
region eu {{ location 50 8; jurisdiction EU; endpoints 127.0.0.1; capacity 10rps
    gpu g {{ url http://127.0.0.1:8000; models m; tokenizer {value} }}
}}
service chat.infer.example.com {{ all-down answer-nothing }}
"""


def test_the_policy_names_a_gpus_tokenizer() -> None:
    region = load_policy_text(GPU.format(value="/models/llama-3.1-8b")).regions[0]
    assert region.gpus[0].tokenizer == "/models/llama-3.1-8b"
    assert BackendSpec.coerce(region.gpus[0]).tokenizer == "/models/llama-3.1-8b"
    for name in ("simulator", "estimate"):
        assert load_policy_text(GPU.format(value=name)).regions[0].gpus[0].tokenizer == name
    with pytest.raises(PolicyError, match="is not a tokenizer"):
        load_policy_text(GPU.format(value="llama"))
