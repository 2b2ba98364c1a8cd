# SPDX-License-Identifier: Apache-2.0
"""The load generator against real components on loopback: the GeoDNS server over the
example policy, real balancers (with the residency re-check) and simulated GPU servers.
Every request is a real DNS query with ECS for its cohort's subnet, then a streamed
completion to the answered address."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from drills import accounting as acc
from drills.arrivals import Arrival, Schedule
from drills.client import monotonic_clock
from drills.cohorts import ResolvedCohort, resolve_cohorts
from drills.failover import failover_time
from drills.loadgen import LoadGenerator
from drills.model import (
    ClientSpec,
    Cohort,
    DnsSpec,
    Load,
    Phase,
    RateSource,
    RequestSpec,
    Residency,
)
from drills.records import AttemptOutcome, RequestRecord
from drills.violations import violations
from regions.balancer import AdmissionConfig, BalancerConfig
from regions.simulator.faults import Fault, FaultMode
from tests.drills.leaky import fallback_leak_text, load_leaky_policy
from tests.drills.stack import MODEL, Stack, running_stack

EU = Residency(jurisdictions=("EU",))
COHORTS = (
    Cohort("eu", 0.5, countries=("DE", "IE"), residency=EU),
    Cohort("us", 0.5, countries=("US",)),
)


def load_spec(cohorts: Sequence[Cohort] = COHORTS, *, max_tokens: int = 8,
              client: ClientSpec | None = None, duration: float = 10.0) -> Load:
    return Load("chat", RequestSpec(MODEL, max_tokens=max_tokens, prompt_tokens=50), cohorts,
                (Phase("all", duration),), rate=RateSource(10.0),
                client=client or ClientSpec(first_byte_timeout=5, stall_timeout=5, retries=2,
                                            backoff=0.1),
                dns=DnsSpec(timeout=1.0), seed=3)


def schedule(cohorts: Sequence[str], count: int, every: float, tokens: int = 8) -> Schedule:
    arrivals = tuple(Arrival(i, i * every, cohorts[i % len(cohorts)], 50, tokens)
                     for i in range(count))
    return Schedule(arrivals, 1 / every if every else float(count))


async def run(stack: Stack, load: Load, sched: Schedule, geolite2,
              during=None) -> list[RequestRecord]:
    cohorts: dict[str, ResolvedCohort] = {
        c.name: c for c in resolve_cohorts(load.cohorts, geolite2, load.seed)}
    t0 = time.monotonic()
    gen = LoadGenerator(sched, cohorts, stack.topology, load, monotonic_clock(t0))
    task = asyncio.create_task(gen.run(drain=10.0))
    if during is not None:
        await during(gen)
    await task
    return gen.records


def allowed(stack: Stack) -> dict[str, frozenset[str] | None]:
    return {c.name: stack.topology.allowed(c.residency) for c in COHORTS}


async def test_cohorts_are_answered_and_served_by_their_regions(example_policy,
                                                                geolite2) -> None:
    async with running_stack(example_policy, geolite2) as stack:
        records = await run(stack, load_spec(), schedule(["eu", "us"], 20, 0.05), geolite2)
    assert len(records) == 20
    for r in records:
        (a,) = r.attempts
        assert a.outcome is AttemptOutcome.COMPLETED, a
        assert a.done and a.status == 200 and a.chunks > 0 and a.ttft is not None
        assert a.dns is not None and a.dns.rcode == "NOERROR" and a.dns.addresses
        expected = {"eu-west", "eu-central"} if r.cohort == "eu" else {"us-east"}
        assert a.region in expected and a.served_region == a.region
        assert a.backend is not None
    assert violations(records, allowed(stack), stack.topology.region_of) == []
    tally = acc.tally(acc.classify(r) for r in records)
    assert tally.ok == 20 and tally.lost == 0


async def test_traffic_moves_when_a_region_goes_down(example_policy, geolite2) -> None:
    """Mark eu-west down in the DNS snapshot (as the probes would) 1 s in: Irish clients
    move to eu-central, and the measured failover time says so. The fault's time is read
    off the generator's clock when it is applied (a stalled machine applies it late)."""
    ireland = (Cohort("ie", 1.0, countries=("IE",), residency=EU),)
    applied: list[float] = []

    async def fail_over(gen: LoadGenerator) -> None:
        await asyncio.sleep(1.0)
        applied.append(gen.clock())
        stack.set_down("eu-west")

    async with running_stack(example_policy, geolite2) as stack:
        records = await run(stack, load_spec(ireland), schedule(["ie"], 100, 0.05),
                            geolite2, fail_over)
    (fault_at,) = applied
    before = {r.first.region for r in records if r.t_issue < fault_at - 0.1}
    after = {r.first.region for r in records if r.t_issue > fault_at + 0.2}
    assert before == {"eu-west"} and after == {"eu-central"}, (fault_at, before, after)
    # measured up to the last request, not a fixed 3 s: a fault a stalled machine applied
    # late still has a window of 1 s after it in the 5 s run
    end = max(r.t_issue for r in records) + 1e-3
    assert end - fault_at > 1.5, (fault_at, end)
    result = failover_time(records, ["ie"], fault_at, end, frozenset({"eu-central"}),
                           window=1.0, min_requests=5)
    assert result.seconds is not None and result.seconds < 0.5


async def test_a_stream_cut_mid_way_is_lost(example_policy, geolite2) -> None:
    """Every GPU of us-east fails while long streams are running: the cut streams are lost,
    later requests get a 5xx without Retry-After and are lost too."""
    us = (Cohort("us", 1.0, countries=("US",)),)

    async def fail_gpus(_gen: LoadGenerator) -> None:
        await asyncio.sleep(0.6)
        for server in stack.fleets["us-east"]:
            server.set_fault(Fault(FaultMode.FAIL))

    async with running_stack(example_policy, geolite2, regions=("us-east",),
                             gpus_per_region=1, time_scale=1.0) as stack:
        records = await run(stack, load_spec(us, max_tokens=400), schedule(["us"], 6, 0.2,
                                                                          tokens=400),
                            geolite2, fail_gpus)
    outcomes = [acc.classify(r) for r in records]
    cut = [c for c in outcomes if c.reason == AttemptOutcome.STREAM_CUT.value]
    assert cut, [c.record.final for c in outcomes]
    assert all(c.outcome is acc.Outcome.LOST for c in outcomes)
    for c in cut:
        final = c.record.final
        assert final.status == 200 and final.t_first_token is not None and not final.done


async def test_shed_with_retry_after_then_completed(example_policy, geolite2) -> None:
    """One slot and a one-deep queue: a burst is shed with 429 + Retry-After, the client
    waits it out and completes: shed and recovered, nothing lost."""
    config = BalancerConfig(max_concurrency=1, admission=AdmissionConfig(max_queue=1))
    us = (Cohort("us", 1.0, countries=("US",)),)
    client = ClientSpec(first_byte_timeout=10, stall_timeout=10, retries=6, backoff=0.1,
                        max_retry_after=1.0)
    async with running_stack(example_policy, geolite2, regions=("us-east",),
                             gpus_per_region=1, cap=1, config=config) as stack:
        records = await run(stack, load_spec(us, client=client, max_tokens=20),
                            schedule(["us"], 6, 0.0, tokens=20), geolite2)
    outcomes = [acc.classify(r) for r in records]
    tally = acc.tally(outcomes)
    assert tally.shed_recovered >= 1, [r.attempts for r in records]
    assert tally.lost == 0 and tally.completed == 6
    shed = next(a for r in records for a in r.attempts if a.outcome is AttemptOutcome.SHED)
    assert shed.status == 429 and shed.retry_after is not None and shed.retry_after >= 1


async def test_a_leaky_policy_is_seen_in_dns_answers_and_served_headers(
        geolite2, tmp_path: Path) -> None:
    """A policy that lets EU clients fail over to us-east, every EU region down: EU clients
    are answered us-east (DNS evidence) and served there (header evidence)."""
    policy = load_leaky_policy(tmp_path)
    async with running_stack(policy, geolite2) as stack:
        stack.set_down("eu-west", "eu-central")
        records = await run(stack, load_spec(), schedule(["eu", "us"], 10, 0.05), geolite2)
    found = violations(records, allowed(stack), stack.topology.region_of)
    assert {v.evidence for v in found} == {"dns", "served"}
    assert {v.region for v in found} == {"us-east"}
    assert {v.cohort for v in found} == {"eu"}


async def test_a_balancer_refuses_what_a_leaky_dns_sent_it(example_policy, geolite2,
                                                          tmp_path: Path) -> None:
    """Defence in depth: DNS leaks (the leaky policy) but the balancers re-check with the
    real one: the EU requests that reached us-east get 451, refused, never served."""
    policy = load_leaky_policy(tmp_path)
    async with running_stack(policy, geolite2, balancer_policy=example_policy) as stack:
        stack.set_down("eu-west", "eu-central")
        records = await run(stack, load_spec(), schedule(["eu", "us"], 10, 0.05), geolite2)
    found = violations(records, allowed(stack), stack.topology.region_of)
    assert found and {v.evidence for v in found} == {"dns"}
    eu = [acc.classify(r) for r in records if r.cohort == "eu"]
    assert all(c.outcome is acc.Outcome.REFUSED and c.record.final.status == 451 for c in eu)
    assert all(acc.classify(r).outcome is acc.Outcome.OK for r in records if r.cohort == "us")


async def test_the_fallback_leak_is_stopped_by_the_engine(geolite2, tmp_path: Path) -> None:
    """The leak the proof rejects (fallback to us-east when the EU is down), loaded without
    the proof: the engine still answers EU clients nothing. They fail closed: refused."""
    policy = load_leaky_policy(tmp_path, fallback_leak_text())
    async with running_stack(policy, geolite2) as stack:
        stack.set_down("eu-west", "eu-central")
        records = await run(stack, load_spec(), schedule(["eu", "us"], 10, 0.05), geolite2)
    assert violations(records, allowed(stack), stack.topology.region_of) == []
    eu = [acc.classify(r) for r in records if r.cohort == "eu"]
    assert all(c.outcome is acc.Outcome.REFUSED for c in eu)
    assert {c.reason for c in eu} == {"dns_refused"}


@pytest.mark.parametrize("max_in_flight", [2])
async def test_the_generator_bounds_its_own_concurrency(example_policy, geolite2,
                                                        max_in_flight: int) -> None:
    us = (Cohort("us", 1.0, countries=("US",)),)
    client = ClientSpec(max_in_flight=max_in_flight)
    async with running_stack(example_policy, geolite2, regions=("us-east",),
                             time_scale=1.0) as stack:
        records = await run(stack, load_spec(us, client=client, max_tokens=100),
                            schedule(["us"], 6, 0.0, tokens=100), geolite2)
    assert sum(r.not_sent for r in records) == 4
    assert acc.tally(acc.classify(r) for r in records).not_sent == 4
