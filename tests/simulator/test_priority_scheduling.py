# SPDX-License-Identifier: Apache-2.0
"""vLLM's ``--scheduling-policy priority`` in the simulator, as worked examples: the waiting
queue goes by priority (lower first) then arrival; a KV shortage preempts the lowest
priority, not the newest; nothing running is preempted to admit a waiting request; an
engine on ``fcfs`` refuses a non-zero priority, over HTTP too, as vLLM does."""

from __future__ import annotations

import aiohttp
import pytest

from regions.simulator.batching import Scheduler, SeqState
from regions.simulator.config import EngineConfig
from regions.simulator.errors import PriorityError, SimConfigError
from regions.simulator.fleet import Fleet, ServerSpec

ROUND = {"prefill_tokens_per_s": 1000.0, "decode_base_ms": 10.0, "decode_alpha": 0.0,
         "decode_context_ms_per_ktoken": 0.0, "kv_watermark": 0.0, "prefix_caching": False}


def make(policy: str, **overrides: object) -> Scheduler:
    return Scheduler(EngineConfig(**{**ROUND, "scheduling_policy": policy, **overrides}))


@pytest.mark.parametrize(("policy", "order"), [
    ("priority", ["running", "urgent-1", "urgent-2", "batch"]),
    ("fcfs", ["running", "batch", "urgent-1", "urgent-2"]),
])
def test_the_waiting_queue_goes_by_priority_then_arrival(policy: str,
                                                         order: list[str]) -> None:
    """One slot, taken; then batch (priority 5), urgent-1 and urgent-2 (priority 1) queue
    in that order. Priority admits the urgent ones first, in their arrival order."""
    s = make(policy, max_num_seqs=1)
    names = {}
    priorities = {"running": 0, "batch": 5, "urgent-1": 1, "urgent-2": 1}
    for at, name in enumerate(["running", "batch", "urgent-1", "urgent-2"]):
        seq = s.submit(10, 3, float(at), priority=priorities[name] if policy == "priority"
                       else 0)
        names[seq.seq_id] = name
        if name == "running":
            step = s.plan()
            assert step is not None
            s.complete(step, step.duration)
    firsts = {}
    now = 1.0
    while (step := s.plan()) is not None:
        now += step.duration
        for seq in s.complete(step, now):
            firsts.setdefault(names[seq.seq_id], now)
    assert sorted(firsts, key=firsts.__getitem__) == order


@pytest.mark.parametrize(("policy", "victim"), [("priority", "low"), ("fcfs", "high")])
def test_a_kv_shortage_preempts_the_lowest_priority_not_the_newest(policy: str,
                                                                   victim: str) -> None:
    """Two sequences of 480 + 40 tokens in a 1,000-token KV cache: low (priority 2) first,
    high (priority 0) after it. When they outgrow the cache, fcfs preempts the newest
    (high), priority the lowest (low); both still finish, nothing emitted twice."""
    s = make(policy, kv_cache_tokens=1000, max_model_len=1000)
    low = s.submit(480, 40, 0.0, priority=2 if policy == "priority" else 0)
    high = s.submit(480, 40, 0.1, priority=0)
    now = 0.0
    while (step := s.plan()) is not None:
        now += step.duration
        s.complete(step, now)
    seqs = {"low": low, "high": high}
    assert all(q.state is SeqState.FINISHED for q in seqs.values())
    assert seqs[victim].preemptions >= 1
    assert all(q.preemptions == 0 for name, q in seqs.items() if name != victim)
    assert s.counters.generation_tokens == 80


def test_nothing_running_is_preempted_to_admit_a_waiting_request() -> None:
    s = make("priority", max_num_seqs=1)
    slow = s.submit(10, 20, 0.0, priority=9)
    step = s.plan()
    assert step is not None
    s.complete(step, step.duration)
    urgent = s.submit(10, 2, 0.1, priority=-5)
    now = step.duration
    while (step := s.plan()) is not None:
        now += step.duration
        s.complete(step, now)
    assert slow.preemptions == 0
    assert urgent.first_token_at is not None and slow.finished_at is not None
    assert urgent.first_token_at > slow.finished_at


def test_fcfs_refuses_a_priority_and_a_policy_must_be_known() -> None:
    s = make("fcfs")
    with pytest.raises(PriorityError, match="Priority scheduling is not enabled"):
        s.submit(10, 3, 0.0, priority=1)
    s.submit(10, 3, 0.0, priority=0)  # zero is what every request has
    with pytest.raises(SimConfigError, match="scheduling_policy"):
        EngineConfig(scheduling_policy="lifo")


@pytest.mark.parametrize(("policy", "status"), [("fcfs", 400), ("priority", 200)])
async def test_over_http_a_priority_is_served_or_refused_as_vllm_does(policy: str,
                                                                      status: int) -> None:
    spec = ServerSpec("sim", engine=EngineConfig(scheduling_policy=policy))
    async with Fleet([spec], time_scale=50) as fleet, aiohttp.ClientSession() as client:
        url = fleet["sim"].url
        async with client.post(f"{url}/v1/completions", json={
                "model": "sim-model", "prompt": "hi", "max_tokens": 2,
                "priority": -3}) as resp:
            assert resp.status == status, await resp.text()
            if status == 400:
                body = await resp.json()
                assert body["error"]["param"] == "priority"
        async with client.post(f"{url}/v1/completions", json={
                "model": "sim-model", "prompt": "hi", "max_tokens": 2,
                "priority": "high"}) as resp:
            assert resp.status == 400
