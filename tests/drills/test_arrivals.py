# SPDX-License-Identifier: Apache-2.0
"""Arrival schedules: rates, phases with ramps, spikes, traces; seeded and bounded."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from director.datasets import traces_dir
from drills.arrivals import build_schedule, offered_rate
from drills.loader import load_drill_text
from drills.traces import TraceRequest, read_trace

BASE = """\
apiVersion: drill/v1
kind: Drill
metadata: {name: shape}
load:
  service: chat
  request: {model: m, max_tokens: 64, prompt_tokens: 100, max_prompt_tokens: 2000}
  LOAD
  phases:
    - {name: warm, duration: 20s}
    - {name: spike, duration: 20s, rps: 8x, ramp: 10s}
    - {name: cool, duration: 20s, rps: 1x}
  cohorts:
    - {name: a, countries: [DE], share: 0.25}
    - {name: b, countries: [US], share: 0.75}
METHOD
"""


def drill(load: str = "rate: {rps: 5}", method: str = "", **fields):
    d = load_drill_text(BASE.replace("LOAD", load).replace("METHOD", method), "shape.yaml")
    return dataclasses.replace(d, load=dataclasses.replace(d.load, **fields)) if fields else d


def test_offered_rate_follows_phases_and_ramps() -> None:
    d = drill()
    rate = lambda t: offered_rate(d.load, d.faults, 5.0, t)  # noqa: E731
    assert rate(5) == 5 and rate(25) == pytest.approx(5 + 35 * 0.5)
    assert rate(35) == 40 and rate(45) == 5 and rate(60) == 0


def test_poisson_schedule_is_seeded_and_about_the_right_size() -> None:
    d = drill()
    one, two = build_schedule(d.load), build_schedule(d.load)
    assert one == two
    expected = 20 * 5 + (5 * 20 + 35 * 5) + 40 * 10 + 20 * 5  # = 875
    assert abs(len(one.arrivals) - expected) < 4 * expected ** 0.5
    times = [a.t for a in one.arrivals]
    assert times == sorted(times) and times[0] >= 0 and times[-1] < 60
    share_a = sum(a.cohort == "a" for a in one.arrivals) / len(one.arrivals)
    assert share_a == pytest.approx(0.25, abs=0.05)
    other = build_schedule(dataclasses.replace(d.load, seed=2))
    assert other.arrivals != one.arrivals


def test_uniform_arrivals_are_evenly_spaced() -> None:
    d = drill("rate: {rps: 5, arrivals: uniform}")
    warm = [a.t for a in build_schedule(d.load).arrivals if a.t < 20]
    assert len(warm) == 100
    gaps = {round(b - a, 2) for a, b in itertools.pairwise(warm)}
    assert gaps == {0.2}


def test_a_traffic_spike_fault_multiplies_the_rate() -> None:
    method = ("method:\n  - {id: burst, type: traffic.spike, start: 2s, duration: 5s,"
              " params: {multiplier: 4}}")
    d = drill(method=method)
    assert offered_rate(d.load, d.faults, 5.0, 3) == 20
    assert offered_rate(d.load, d.faults, 5.0, 8) == 5


def test_max_requests_bounds_the_schedule() -> None:
    d = drill(max_requests=50)
    schedule = build_schedule(d.load)
    assert len(schedule.arrivals) == 50 and schedule.truncated > 0


def test_trace_replay_keeps_the_trace_shape_and_tokens() -> None:
    rows = [TraceRequest(i * 0.5, 100 + i, 10 + i) for i in range(400)]  # 2 rps, 200 s
    d = drill("trace: {file: azure-llm-2023/AzureLLMInferenceTrace_conv.csv.gz, "
              "offset: 10s, speedup: 2}")
    schedule = build_schedule(d.load, d.faults, rows)
    warm = [a for a in schedule.arrivals if a.t < 20]
    # from 10 s on, twice as fast: 4 rps
    assert len(warm) == 80
    assert warm[0].prompt_tokens == 120 and warm[0].output_tokens == 30
    spike = [a for a in schedule.arrivals if 30 <= a.t < 40]
    assert len(spike) == pytest.approx(8 * 40, rel=0.15)
    assert max(a.output_tokens for a in schedule.arrivals) <= 64  # capped by max_tokens


@pytest.mark.parametrize(("path", "fmt", "rows"), [
    ("azure-llm-2023/AzureLLMInferenceTrace_conv.csv.gz", "azure", 19366),
    ("azure-llm-2023/AzureLLMInferenceTrace_code.csv.gz", "azure", 8819),
    ("mooncake-fast25-conversation/conversation_trace.first45min.jsonl.gz", "mooncake", 8940),
])
def test_real_traces_read(path: str, fmt: str, rows: int) -> None:
    trace = read_trace(str(traces_dir() / path), fmt)
    assert len(trace) == rows
    assert trace[0].t == 0 and all(a.t <= b.t for a, b in itertools.pairwise(trace))
    assert all(r.input_tokens >= 1 and r.output_tokens >= 1 for r in trace)
