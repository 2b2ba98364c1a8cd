# SPDX-License-Identifier: Apache-2.0
"""The load's arrival schedule, computed before the drill starts (seeded, reproducible).

The offered rate at time t is ``base(t) * spike(t)``:

- ``base(t)``: the phase's rate (``rps: 8x`` of the baseline, or an absolute rps), moving
  linearly from the previous phase's rate over the phase's ``ramp``;
- ``spike(t)``: the product of the active ``traffic.spike`` faults' multipliers (each
  ramping up over its own ``ramp``).

With ``rate`` the arrivals are a Poisson process (by thinning) or evenly spaced; with a
``trace`` they are the trace's own arrivals from ``offset`` on (time divided by
``speedup``), each repeated ``m(t)`` times on average, where m is the multiplier over the
trace's own rate, copies spread over the next gap. Each arrival is given a cohort by share
and, when the load names ``tenants``, a tenant by share (smooth weighted round robin, so the
shares hold exactly over any stretch of the load).

A ``tenant.flood`` fault makes its tenant send ``flood_rates[fault id]`` requests per second
in all while it lasts: its share of the load plus arrivals of its own at the rest, evenly
spaced or Poisson as the load's ``arrivals`` say (a trace's load: Poisson), each from a
client of a cohort drawn by share.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from drills.model import Fault, FaultType, Load, TenantShare, TraceSource
from drills.traces import TraceRequest, read_trace


@dataclass(frozen=True)
class Arrival:
    seq: int
    t: float
    cohort: str
    prompt_tokens: int
    output_tokens: int
    tenant: str | None = None


@dataclass(frozen=True)
class Schedule:
    arrivals: tuple[Arrival, ...]
    baseline_rps: float
    truncated: int = 0     # arrivals dropped by max_requests


def _base_rate(load: Load, baseline: float, t: float) -> float:
    start = 0.0
    previous = None
    for phase in load.phases:
        rate = phase.rps if phase.rps is not None else baseline * phase.multiplier
        if t < start + phase.duration or phase is load.phases[-1]:
            if previous is not None and phase.ramp > 0 and t < start + phase.ramp:
                frac = max(0.0, (t - start) / phase.ramp)
                return previous + (rate - previous) * frac
            return rate
        previous = rate
        start += phase.duration
    return 0.0


def _spike(spikes: Sequence[Fault], t: float) -> float:
    factor = 1.0
    for f in spikes:
        if f.start <= t < f.end:
            m = float(f.params.get("multiplier", 1.0))
            ramp = float(f.params.get("ramp", 0.0))
            if ramp > 0 and t < f.start + ramp:
                m = 1.0 + (m - 1.0) * (t - f.start) / ramp
            factor *= m
    return factor


def offered_rate(load: Load, faults: Sequence[Fault], baseline: float, t: float) -> float:
    """Requests per second the schedule aims at, at time ``t``."""
    if t < 0 or t >= load.duration:
        return 0.0
    spikes = [f for f in faults if f.type is FaultType.TRAFFIC_SPIKE]
    return _base_rate(load, baseline, t) * _spike(spikes, t)


def _times_from_rate(load: Load, faults: Sequence[Fault], rng: random.Random,
                     baseline: float, arrivals: str) -> list[float]:
    return _times(lambda t: offered_rate(load, faults, baseline, t), 0.0, load.duration,
                  rng, arrivals)


def _times(rate: Callable[[float], float], start: float, end: float, rng: random.Random,
           arrivals: str) -> list[float]:
    """Arrival times in ``[start, end)`` at ``rate(t)`` per second: Poisson (by thinning)
    or evenly spaced."""
    step = 0.05
    steps = int((end - start) / step)
    peak = max((rate(start + i * step) for i in range(steps + 1)), default=0.0)
    if peak <= 0:
        return []
    times: list[float] = []
    if arrivals == "poisson":
        t = start
        while True:
            t += rng.expovariate(peak)
            if t >= end:
                break
            if rng.random() * peak < rate(t):
                times.append(t)
        return times
    owed = 0.0
    for i in range(steps):
        owed += rate(start + i * step) * step
        while owed >= 1.0:
            owed -= 1.0
            times.append(start + i * step)
    return times


def tenant_order(tenants: Sequence[TenantShare], count: int) -> list[str | None]:
    """The tenant of each of ``count`` arrivals: smooth weighted round robin by share
    (nginx's), so every stretch of arrivals holds the shares as closely as whole requests
    can; all None without tenants."""
    if not tenants:
        return [None] * count
    current = [0.0] * len(tenants)
    out: list[str | None] = []
    for _ in range(count):
        for i, t in enumerate(tenants):
            current[i] += t.share
        best = max(range(len(tenants)), key=lambda i: current[i])
        current[best] -= 1.0
        out.append(tenants[best].name)
    return out


def flood_base_rate(load: Load, faults: Sequence[Fault], baseline: float, fault: Fault,
                    t: float) -> float:
    """What the flooding tenant sends at ``t`` as its share of the load (0 without one)."""
    share = next((s.share for s in load.tenants if s.name == fault.params.get("tenant")), 0.0)
    return share * offered_rate(load, faults, baseline, t)


def _flood_items(load: Load, faults: Sequence[Fault], baseline: float,
                 flood_rates: Mapping[str, float]) -> list[tuple[float, str, str]]:
    """(time, cohort, tenant) of every flood's own arrivals."""
    names = [c.name for c in load.cohorts]
    weights = [c.share for c in load.cohorts]
    arrivals = load.rate.arrivals if load.rate is not None else "poisson"
    out = []
    for f in faults:
        if f.type is not FaultType.TENANT_FLOOD or f.id not in flood_rates:
            continue
        total = flood_rates[f.id]
        rng = random.Random(f"flood:{load.seed}:{f.id}")

        def extra(t: float, f: Fault = f, total: float = total) -> float:
            return max(0.0, total - flood_base_rate(load, faults, baseline, f, t))

        for t in _times(extra, f.start, min(f.end, load.duration), rng, arrivals):
            out.append((t, rng.choices(names, weights)[0], str(f.params["tenant"])))
    return out


def _trace_rows(load: Load, faults: Sequence[Fault], rng: random.Random,
                rows: Sequence[TraceRequest], tr: TraceSource,
                ) -> tuple[list[tuple[float, TraceRequest]], float]:
    window = [r for r in rows
              if tr.offset <= r.t < tr.offset + load.duration * tr.speedup]
    span = load.duration
    baseline = len(window) / span if span > 0 else 0.0
    out: list[tuple[float, TraceRequest]] = []
    for i, row in enumerate(window):
        t = (row.t - tr.offset) / tr.speedup
        nxt = (window[i + 1].t - tr.offset) / tr.speedup if i + 1 < len(window) else span
        m = offered_rate(load, faults, baseline, t) / baseline if baseline else 0.0
        copies = int(m) + (1 if rng.random() < m - int(m) else 0)
        for k in range(copies):
            at = t if k == 0 else t + rng.random() * max(0.0, min(nxt, span) - t)
            out.append((at, row))
    out.sort(key=lambda x: x[0])
    return out, baseline


def build_schedule(load: Load, faults: Sequence[Fault] = (),
                   trace_rows: Sequence[TraceRequest] | None = None,
                   flood_rates: Mapping[str, float] | None = None) -> Schedule:
    """Every arrival of the drill, in time order, with its cohort, tenant and token counts.
    ``flood_rates``: each ``tenant.flood`` fault's total rate for its tenant (requests per
    second, resolved against the running system's quotas); a flood left out sends nothing
    of its own."""
    rng = random.Random(load.seed)
    names = [c.name for c in load.cohorts]
    weights = [c.share for c in load.cohorts]
    req = load.request
    items: list[tuple[float, int, int]] = []
    if load.trace is not None:
        rows = trace_rows if trace_rows is not None else read_trace(load.trace.path,
                                                                    load.trace.format)
        timed, baseline = _trace_rows(load, faults, rng, rows, load.trace)
        items = [(t, min(r.input_tokens, req.max_prompt_tokens),
                  min(r.output_tokens, req.max_tokens)) for t, r in timed]
    elif load.rate is not None:
        baseline = load.rate.rps
        items = [(t, req.prompt_tokens, req.max_tokens)
                 for t in _times_from_rate(load, faults, rng, baseline, load.rate.arrivals)]
    else:
        baseline = 0.0
    base = [(t, rng.choices(names, weights)[0], prompt, output) for t, prompt, output in items]
    tenants = tenant_order(load.tenants, len(base))
    merged = [(t, cohort, tenant, prompt, output)
              for (t, cohort, prompt, output), tenant in zip(base, tenants, strict=True)]
    merged += [(t, cohort, tenant, req.prompt_tokens, req.max_tokens)
               for t, cohort, tenant in _flood_items(load, faults, baseline, flood_rates or {})]
    merged.sort(key=lambda x: x[0])
    arrivals = [Arrival(seq, round(t, 6), cohort, prompt, output, tenant)
                for seq, (t, cohort, tenant, prompt, output) in enumerate(merged)]
    truncated = max(0, len(arrivals) - load.max_requests)
    return Schedule(tuple(arrivals[:load.max_requests]), baseline, truncated)


def expected_count(load: Load, faults: Sequence[Fault], baseline: float) -> int:
    """About how many requests the schedule holds (for the dry run)."""
    step = 0.1
    total = sum(offered_rate(load, faults, baseline, i * step) * step
                for i in range(math.ceil(load.duration / step)))
    return round(total)
