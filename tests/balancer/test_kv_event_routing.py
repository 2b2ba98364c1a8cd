# SPDX-License-Identifier: Apache-2.0
"""The balancer follows simulated servers' KV events over real ZeroMQ sockets: requests
sharing a prefix go where the server says the prefix is cached, and a broken stream makes
the balancer fall back to its own record within a second."""

from __future__ import annotations

import aiohttp
import pytest

from policies import load_policy_text
from policies.errors import PolicyError
from regions.balancer import BackendSpec, BalancerConfig
from regions.balancer.app import build_balancer
from regions.simulator.fleet import Fleet, ServerSpec
from tests.balancer.helpers import MODEL, completion, stream_completion
from tests.free_ports import free_port
from tests.run_clock import eventually

LONG = "You are a helpful assistant who answers briefly. " * 40  # 1,960 characters


def asking(prompt: str) -> dict[str, object]:
    body = completion(2, prompt=prompt)
    del body["x_prompt_tokens"]  # the prompt's own tokens: 30 full blocks of 16
    return body


async def test_requests_follow_the_servers_kv_events_and_fall_back_when_they_stop() -> None:
    endpoints = [(f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}")
                 for _ in range(3)]
    specs = [ServerSpec(f"gpu{i}", models=(MODEL,), kv_events=pub, kv_events_replay=replay)
             for i, (pub, replay) in enumerate(endpoints)]
    config = BalancerConfig(scorers=(("prefix-affinity", 3.0), ("queue-depth", 1.0)))
    async with Fleet(specs, time_scale=20.0) as fleet:
        backends = [BackendSpec(s.spec.name, s.url, (MODEL,), 16, kv_events=pub,
                                kv_events_replay=replay, tokenizer="simulator")
                    for s, (pub, replay) in zip(fleet, endpoints, strict=True)]
        balancer = build_balancer("test-region", backends, config)
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client:
            index = balancer.kv_index
            assert index is not None
            status, first, _ = await stream_completion(client, asking(LONG))
            assert status == 200
            # the server's BlockStored events reach the index: it trusts that stream now
            await eventually(lambda: index.exact(first) and index.blocks_of(first) >= 30)
            served = set()
            for turn in range(6):
                body = asking(f"{LONG} question {turn}")
                status, backend, _ = await stream_completion(client, body)
                assert status == 200
                served.add(backend)
            assert served == {first}
            explained = balancer.explain("/v1/completions", asking(LONG))
            step = next(s for s in explained["steps"] if s.get("plugin") == "prefix-affinity")
            assert step["scores"][first] > 0.9
            why = explained["prefix"][first]
            assert why["index"] == "precise" and why["matched_blocks"] >= 29
            assert why["within_bound"] and why["free_slot"]

            # the publisher goes away: the index stops trusting that backend within a second
            fleet.servers[first].kv_publish.close()
            await eventually(lambda: not index.exact(first), timeout=1.5)
            why = balancer.explain("/v1/completions", asking(LONG))["prefix"][first]
            assert why["index"] == "approximate" and why["matched_blocks"] > 0
            # the approximate record still knows where the prefix went
            status, backend, _ = await stream_completion(client, asking(LONG))
            assert status == 200 and backend == first


POLICY = """
zone infer.example.com {{ ns ns1.infer.example.com 127.0.0.1 }}
region r {{ location 1 1; jurisdiction X; endpoints 127.0.0.1; capacity 10rps
    gpu gpu0 {{ url http://127.0.0.1:8000; models {model}; kv-events {events} }}
}}
service chat.infer.example.com {{ all-down answer-nothing }}
"""


def test_the_policy_names_where_a_gpu_publishes_its_kv_events() -> None:
    policy = load_policy_text(POLICY.format(
        model=MODEL, events="tcp://10.0.0.5:5557 replay tcp://10.0.0.5:5558"))
    (gpu,) = policy.region("r").gpus
    assert (gpu.kv_events, gpu.kv_events_replay) == ("tcp://10.0.0.5:5557",
                                                     "tcp://10.0.0.5:5558")
    spec = BackendSpec.coerce(gpu)
    assert (spec.kv_events, spec.kv_events_replay) == (gpu.kv_events, gpu.kv_events_replay)


@pytest.mark.parametrize("events", ["tcp://*:5557", "http://10.0.0.5:5557", "tcp://10.0.0.5"])
def test_a_kv_events_address_to_bind_or_of_another_kind_is_refused(events: str) -> None:
    with pytest.raises(PolicyError, match="ZeroMQ address"):
        load_policy_text(POLICY.format(model=MODEL, events=events))
