# SPDX-License-Identifier: Apache-2.0
"""Reconciling cancelled requests' output tokens with the engines' counters
(``usage_reconcile``): how a tally settles (table: the residual split, a negative residual,
a counter reset, no cancellations, ...), when the reconciler reads a backend and what
voids a reading, and the generated-token counter read from vLLM and SGLang pages."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

import engines
from regions.balancer.scheduling.backend import Backend, BackendSpec
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.signals.engine_scrape import MetricsStatus
from regions.balancer.signals.usage_reconcile import Tally, UsageReconciler, split
from tenants.usage import UsageKey

A = UsageKey("acme", "*", "m", "eu-west", "gpu0")
B = UsageKey("globex", "*", "m", "eu-west", "gpu0")

# (finished requests as (output, short key or None, headroom), counter, outcome, shares);
# every case starts from a baseline of 1000
Case = tuple[list[tuple[int, UsageKey | None, int | None]], float, str,
             tuple[tuple[UsageKey, int], ...]]
CASES: dict[str, Case] = {
    "split evenly, remainder to the first": (
        [(10, A, 20), (4, None, None), (3, B, 20), (2, A, 20)], 1000 + 19 + 7, "attributed",
        ((A, 2 * 2 + 1), (B, 2))),
    "the first short request's key gets the remainder": (
        [(1, B, 9), (1, A, 9)], 1000 + 2 + 5, "attributed", ((B, 3), (A, 2))),
    "fewer tokens than requests": ([(1, A, 9), (1, B, 9)], 1000 + 2 + 1, "attributed",
                                   ((A, 1),)),
    "nothing generated after the last piece": ([(5, A, 9)], 1005, "attributed", ()),
    "no limit on a short request": ([(5, A, None)], 1005 + 500, "attributed", ((A, 500),)),
    "negative residual": ([(5, A, 9), (7, None, None)], 1000 + 10, "negative", ()),
    "counter reset (engine restart)": ([(5, A, 9)], 40, "reset", ()),
    "no cancellations": ([(5, None, None), (6, None, None)], 1000 + 11 + 3, "no-short", ()),
    "above what the short requests could generate": ([(5, A, 4), (1, B, 2)], 1000 + 6 + 7,
                                                     "over-headroom", ()),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_tally_settles(name: str) -> None:
    finished, counter, outcome, shares = CASES[name]
    tally = Tally()
    tally.restart(1000.0)
    for output, short, headroom in finished:
        tally.add(output, short, headroom)
    settled = tally.settle(counter)
    assert (settled.outcome, settled.shares) == (outcome, shares)
    if outcome == "attributed":
        assert sum(n for _, n in settled.shares) == settled.residual
    # whatever the outcome, the counter is the new baseline and the tally starts afresh
    assert (tally.baseline, tally.recorded, tally.finished, tally.shorts, tally.short) == (
        counter, 0, 0, 0, {})
    tally.add(3, A, 9)
    assert tally.settle(counter + 5).shares == ((A, 2),)


def test_no_baseline_and_untracked_requests_attribute_nothing() -> None:
    tally = Tally()
    tally.add(5, A, 9)  # before the first reading: its tokens cannot be told apart
    assert tally.shorts == 0
    assert tally.settle(700).outcome == "first"
    tally.add(5, A, 9)
    tally.tainted = True  # a request nobody accounted ran there too
    assert (tally.settle(800).outcome, tally.baseline) == ("tainted", 800)


def test_split() -> None:
    assert split(10, {A: 3, B: 1}, 4) == ((A, 2 * 3 + 2), (B, 2))
    assert split(0, {A: 1}, 1) == ()


# -- the reconciler ----------------------------------------------------------------------

def page(generated: float | None, running: float = 0, waiting: float = 0,
         engine: str = "vllm") -> engines.EngineLoad:
    return engines.EngineLoad(engine, waiting, running, None, generation_tokens=generated)


@dataclass
class FakeEngine:
    """What the reconciler reads of a backend: the next pages, then the last one again;
    ``during`` runs while a page is being read."""

    pages: list[engines.EngineLoad]
    reads: int = 0
    error: Exception | None = None  # raised instead
    during: list[Callable[[], None]] = field(default_factory=list)
    accounted: list[tuple[UsageKey, int]] = field(default_factory=list)

    async def read(self, b: Backend) -> engines.EngineLoad:
        self.reads += 1
        for act in self.during:
            act()
        await asyncio.sleep(0)
        if self.error is not None:
            raise self.error
        return self.pages.pop(0) if len(self.pages) > 1 else self.pages[0]

    def account(self, key: UsageKey, tokens: int) -> None:
        self.accounted.append((key, tokens))


def reconciler(engine: FakeEngine, spec_engine: str | None = None,
               ) -> tuple[UsageReconciler, BackendPool]:
    pool = BackendPool([BackendSpec("gpu0", "http://gpu0:8000", ("m",), 4,
                                    engine=spec_engine)])
    return UsageReconciler(pool, engine.read, engine.account, every_s=0.05,
                           settle_s=0.01), pool


async def until_idle(r: UsageReconciler) -> None:
    for _ in range(200):
        await asyncio.sleep(0.01)
        if not r.scheduled:
            return
    raise AssertionError("the reconciler kept scraping")


async def test_an_idle_backend_is_read_and_its_cancelled_requests_settled() -> None:
    engine = FakeEngine([page(100), page(100 + 30 + 4 + 5, running=1), page(100 + 30 + 4 + 5)])
    r, pool = reconciler(engine)
    await r.baseline_all()
    b = pool["gpu0"]
    b.in_flight = 2
    r.finished(b, 30)
    await asyncio.sleep(0.05)
    assert engine.reads == 1  # not read while requests are in flight
    b.in_flight = 0
    r.finished(b, 4, A, 36)
    await until_idle(r)
    # the engine was still busy at the first reading (an abort not yet seen): read again
    assert engine.reads == 3
    assert engine.accounted == [(A, 5)]
    assert r.outcomes == {"first": 1, "attributed": 1}


async def test_a_request_bound_while_reading_voids_the_reading() -> None:
    engine = FakeEngine([page(100), page(150)])
    r, pool = reconciler(engine)
    await r.baseline_all()
    b = pool["gpu0"]
    r.finished(b, 40, A, 60)
    engine.during = [lambda: setattr(b, "in_flight", 1)]
    await until_idle(r)
    tally = r.tally("gpu0")
    assert engine.accounted == [] and tally is not None and tally.shorts == 1
    engine.during = []
    b.in_flight = 0
    await r.close()  # the balancer stops: what is left is settled
    assert engine.accounted == [(A, 10)]


async def test_a_request_finished_while_reading_voids_the_reading() -> None:
    engine = FakeEngine([page(100), page(150)])
    r, pool = reconciler(engine)
    await r.baseline_all()
    b = pool["gpu0"]
    r.finished(b, 40, A, 60)
    tally = r.tally("gpu0")
    assert tally is not None
    engine.during = [lambda: tally.add(7)]
    await until_idle(r)
    assert engine.accounted == [] and tally.recorded == 47


async def test_an_engine_without_the_counter_keeps_the_relayed_counts() -> None:
    engine = FakeEngine([page(None, engine="tgi")])
    r, pool = reconciler(engine)
    await r.baseline_all()
    b = pool["gpu0"]
    for _ in range(3):
        r.finished(b, 4, A, 60)
        await until_idle(r)
    await r.close()
    assert engine.accounted == [] and engine.reads == 1  # not read again for a while

    declared = FakeEngine([page(None, engine="tgi")])
    r, pool = reconciler(declared, spec_engine="tgi")
    await r.baseline_all()
    r.finished(pool["gpu0"], 4, A, 60)
    await until_idle(r)
    await r.close()
    assert declared.reads == 0  # TGI exports no such counter: never read


@pytest.mark.parametrize(("error", "reads"), [(MetricsStatus(404), 1),
                                              (MetricsStatus(503), 3), (OSError(), 3)])
async def test_a_server_without_metrics_is_not_read_again_soon(error: Exception,
                                                              reads: int) -> None:
    """No ``/metrics`` page at all: left alone for a while; a failing one: read at the
    next idle moment after ``every_s``."""
    engine = FakeEngine([page(100)], error=error)
    r, pool = reconciler(engine)
    await r.baseline_all()
    for _ in range(2):
        await asyncio.sleep(r.every_s)
        r.finished(pool["gpu0"], 4, A, 60)
        await until_idle(r)
    assert (engine.reads, engine.accounted) == (reads, [])


async def test_nothing_is_tallied_when_reconciling_is_off() -> None:
    engine = FakeEngine([page(100)])
    r, pool = reconciler(engine)
    r.every_s = 0
    await r.baseline_all()
    r.finished(pool["gpu0"], 4, A, 60)
    await r.close()
    assert (engine.reads, r.active, r.tally("gpu0")) == (0, False, None)


# -- the counter on the engines' pages ---------------------------------------------------

VLLM_PAGE = """# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 0.0
vllm:num_requests_running{engine="0",model_name="m"} 0.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 1200.0
vllm:generation_tokens_total{engine="1",model_name="m"} 34.0
vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e9
"""
SGLANG_PAGE = """sglang:num_queue_reqs{model_name="m"} 2
sglang:num_running_reqs{model_name="m"} 1
sglang:generation_tokens_total{model_name="m"} 77
"""
TGI_PAGE = "tgi_queue_size 0\ntgi_batch_current_size 0\n"


@pytest.mark.parametrize(("text", "engine", "generated"), [
    (VLLM_PAGE, "vllm", 1234.0), (SGLANG_PAGE, "sglang", 77.0), (TGI_PAGE, "tgi", None),
])
def test_the_generated_token_counter_is_read(text: str, engine: str,
                                             generated: float | None) -> None:
    load = engines.parse_load(text, None)
    assert (load.engine, load.generation_tokens) == (engine, generated)
