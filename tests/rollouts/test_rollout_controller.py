"""The rollout controller on a real Valkey, with the balancers' counts written as they
publish them and time in the test's hands: steps advance only when every gate passes
after the interval, a failed gate rolls back at once, too few samples extend the window
and then pause, operator actions check the state, and a new controller (an API restart)
takes over where the last one was."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from director.rollouts.controller import (
    ABORTED,
    COMPLETED,
    PAUSED,
    ROLLED_BACK,
    RUNNING,
    RolloutController,
    RolloutError,
    RolloutSpec,
)
from director.rollouts.gates import Gate
from policies import load_policy_text
from state import AsyncStateStore
from state.outcomes import Outcomes, outcome_field

MODEL = "m"
POLICY = load_policy_text("""
zone infer.example.com { ns ns1.infer.example.com 127.0.0.1 }
region eu { location 50 8; jurisdiction EU; endpoints 127.0.0.1; capacity 10rps
    gpu a { url http://127.0.0.1:8000; models m; revision m r1 }
    gpu b { url http://127.0.0.1:8001; models m; revision m r2 }
}
region us { location 40 -75; jurisdiction US; endpoints 127.0.0.2; capacity 10rps
    gpu c { url http://127.0.0.1:8002; models m; revision m r1 }
}
service chat.infer.example.com { all-down answer-nothing }
""")
SPEC = RolloutSpec(MODEL, "r1", "r2", steps=(10.0, 50.0, 100.0), interval_s=60.0,
                   gates=(Gate("ttft-p95", 1.5, 20), Gate("error-rate", 0.05, 20)),
                   max_inconclusive=1)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Balancer:
    """The eu balancer's published counts, as ``RevisionOutcomes`` writes them."""

    def __init__(self, store: AsyncStateStore, epoch: str = "run-1") -> None:
        self.store = store
        self.epoch = epoch
        self.counts = {"r1": Outcomes(), "r2": Outcomes()}

    async def serve(self, revision: str, count: int, *, ttft: float = 0.2,
                    errors: int = 0) -> None:
        for i in range(count):
            self.counts[revision].record(ok=i >= errors, ttft_s=ttft, output_tokens=10)
        await self.store.write_outcomes("eu", {outcome_field(MODEL, r, self.epoch): o.to_json()
                                               for r, o in self.counts.items()})


async def split(store: AsyncStateStore, region: str = "eu") -> list | None:
    raw = await store.client.hget(store.keys.split(region), MODEL)
    return None if raw is None else json.loads(raw)


@asynccontextmanager
async def opened(valkey, prefix: str) -> AsyncIterator[AsyncStateStore]:
    store = AsyncStateStore.from_url(valkey.url, prefix=prefix)
    try:
        yield store
    finally:
        await store.close()


async def test_steps_advance_when_every_gate_passes_and_a_failure_rolls_back(
        valkey, prefix: str) -> None:
    async with opened(valkey, prefix) as store:
        clock, audit = Clock(), []
        controller = RolloutController(store, lambda *a: audit.append(a), clock)
        balancer = Balancer(store)
        await balancer.serve("r1", 200)  # before the rollout: not in its windows
        rollout = await controller.start(SPEC, POLICY, "alice")
        assert rollout.spec.regions == ("eu",)  # us declares no r2
        assert await split(store) == [["r1", 90.0], ["r2", 10.0]]
        assert await split(store, "us") is None

        await balancer.serve("r1", 100)
        await balancer.serve("r2", 30)
        clock.now += 30
        assert await controller.tick() == []  # the interval is not over
        clock.now += 31
        [stepped] = await controller.tick()
        assert (stepped.status, stepped.percent) == (RUNNING, 50.0)
        assert await split(store) == [["r1", 50.0], ["r2", 50.0]]

        await balancer.serve("r1", 50)
        # 40 % against none, 35 points past the threshold, some 4.5 standard errors: it
        # fails at once, mid-interval
        await balancer.serve("r2", 40, errors=16)
        clock.now += 5
        [failed] = await controller.tick()
        assert failed.status == ROLLED_BACK and "error rate 40.00%" in failed.reason
        assert await split(store) == [["r1", 100.0], ["r2", 0.0]]
        assert [a[1] for a in audit] == ["rollout.step", "rollout.rollback"]
        events = [e["event"] for e in (await controller.get(rollout.id)).history]
        assert events == ["started", "step", "passed", "step", "rolled-back"]
        assert await controller.tick() == []  # nothing running


async def test_a_good_candidate_completes_and_a_new_controller_takes_over(
        valkey, prefix: str) -> None:
    async with opened(valkey, prefix) as store:
        clock = Clock()
        first = RolloutController(store, lambda *a: None, clock)
        balancer = Balancer(store)
        rollout = await first.start(SPEC, POLICY, "alice")
        for _ in SPEC.steps[:-1]:
            await balancer.serve("r1", 60)
            await balancer.serve("r2", 60)
            clock.now += 61
            await first.tick()
        second = RolloutController(store, lambda *a: None, clock)  # another API instance
        assert await second.tick() == []  # the first one runs the rollouts
        await first.release()  # it stops: the second takes over
        assert (await second.get(rollout.id)).percent == 100.0
        await balancer.serve("r2", 60)  # 100 %: judged against r1's window of the 50 % step
        clock.now += 61
        [done] = await second.tick()
        assert done.status == COMPLETED and await split(store) == [["r1", 0.0], ["r2", 100.0]]
        await second.clear(rollout.id, "alice")  # the policy says r2 now: withdraw the split
        assert await split(store) is None and await second.all() == []


async def test_too_few_samples_extend_the_window_then_pause_and_a_failure_still_rolls_back(
        valkey, prefix: str) -> None:
    async with opened(valkey, prefix) as store:
        clock = Clock()
        controller = RolloutController(store, lambda *a: None, clock)
        balancer = Balancer(store)
        rollout = await controller.start(SPEC, POLICY, "alice")
        await balancer.serve("r1", 100)
        await balancer.serve("r2", 5)
        clock.now += 61
        [extended] = await controller.tick()
        assert (extended.status, extended.percent, extended.inconclusive) == (RUNNING, 10.0, 1)
        clock.now += 61
        [paused] = await controller.tick()
        assert paused.status == PAUSED and "too few samples" in paused.reason
        await balancer.serve("r2", 30, errors=10)  # paused, it still serves its share
        [failed] = await controller.tick()
        assert failed.status == ROLLED_BACK and "error rate" in failed.reason
        # another rollout, to be resumed and aborted
        await controller.clear(rollout.id, "bob")
        rollout = await controller.start(SPEC, POLICY, "alice")
        await controller.pause(rollout.id, "bob")
        resumed = await controller.resume(rollout.id, "bob")
        assert (resumed.status, resumed.percent) == (RUNNING, 10.0)
        aborted = await controller.abort(rollout.id, "bob")
        assert aborted.status == ABORTED and await split(store) == [["r1", 100.0], ["r2", 0.0]]


async def test_what_cannot_run_is_refused(valkey, prefix: str) -> None:
    async with opened(valkey, prefix) as store:
        controller = RolloutController(store, lambda *a: None, Clock())
        bad = [
            (RolloutSpec(MODEL, "r1", "r1"), "same revision"),
            (RolloutSpec(MODEL, "r1", "r3"), "no region declares both"),
            (RolloutSpec(MODEL, "r1", "r2", regions=("us",)), "regions us"),
            (RolloutSpec(MODEL, "r1", "r2", steps=(50.0, 10.0, 100.0)), "ascending"),
            (RolloutSpec(MODEL, "r1", "r2", steps=(10.0, 50.0)), "the last 100"),
            (RolloutSpec(MODEL, "r1", "r2", interval_s=0.1), "interval"),
        ]
        for spec, message in bad:
            with pytest.raises(RolloutError, match=message):
                await controller.start(spec, POLICY, "alice")
        rollout = await controller.start(SPEC, POLICY, "alice")
        with pytest.raises(RolloutError, match="running"):
            await controller.start(SPEC, POLICY, "alice")
        with pytest.raises(RolloutError, match="running"):
            await controller.resume(rollout.id, "alice")
        with pytest.raises(RolloutError, match="abort it first"):
            await controller.clear(rollout.id, "alice")
        with pytest.raises(KeyError):
            await controller.pause("nope", "alice")
        for body, message in (({"model": "m"}, "baseline"), ({"model": 3, "baseline": "a",
                                                              "candidate": "b"}, "model"),
                              ({"model": "m", "baseline": "a", "candidate": "b",
                                "gates": [{"name": "p99", "threshold": 1}]}, "unknown gate")):
            with pytest.raises(RolloutError, match=message):
                RolloutSpec.from_json(body)
        assert RolloutSpec.from_json(SPEC.to_json()) == SPEC


async def test_blue_green_waits_for_a_ready_green_pool_and_is_judged_against_blue(
        valkey, prefix: str) -> None:
    async with opened(valkey, prefix) as store:
        clock = Clock()
        controller = RolloutController(store, lambda *a: None, clock)
        balancer = Balancer(store)
        await balancer.serve("r1", 200, ttft=0.2)  # blue, before the switch
        spec = RolloutSpec(MODEL, "r1", "r2", steps=(100.0,), interval_s=60.0,
                           gates=SPEC.gates, require_ready=True)
        with pytest.raises(RolloutError, match="not ready for r2: eu/b"):
            await controller.start(spec, POLICY, "alice")  # never probed
        await store.record_probe("eu", "b", ok=True, rise=1, fall=1)
        await store.set_drain("eu", "b")
        with pytest.raises(RolloutError, match="eu/b"):
            await controller.start(spec, POLICY, "alice")  # drained
        await store.set_drain("eu", "b", draining=False)
        await controller.start(spec, POLICY, "alice")
        assert await split(store) == [["r1", 0.0], ["r2", 100.0]]
        await balancer.serve("r2", 60, ttft=0.6)  # green is 3x slower than blue was
        [failed] = await controller.tick()
        assert failed.status == ROLLED_BACK and "time to first token" in failed.reason
        assert await split(store) == [["r1", 100.0], ["r2", 0.0]]


async def test_the_balancers_of_a_region_and_their_restarts_add_up(valkey, prefix: str) -> None:
    """Two balancers in one region and a restart of one of them (a new run, counting from
    zero): each run has its own counts, a window adds them, nothing is overwritten."""
    async with opened(valkey, prefix) as store:
        clock = Clock()
        controller = RolloutController(store, lambda *a: None, clock)
        first, second = Balancer(store, "a-1"), Balancer(store, "b-1")
        await first.serve("r2", 500, errors=100)  # before the rollout: not in its window
        rollout = await controller.start(SPEC, POLICY, "alice")
        await first.serve("r1", 30)
        await second.serve("r1", 30)
        await first.serve("r2", 12)
        restarted = Balancer(store, "a-2")  # the first one restarted: zero again
        await restarted.serve("r2", 12, errors=10)
        [failed] = await controller.tick()  # 10 errors of 24 candidate requests: 41.67 %
        assert failed.id == rollout.id and failed.status == ROLLED_BACK
        assert "error rate 41.67%" in failed.reason
