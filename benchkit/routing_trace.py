# SPDX-License-Identifier: Apache-2.0
"""Request traces, sliced and time-compressed for replay: the Azure LLM inference 2023
conversation and code traces and the Mooncake FAST'25 conversation trace (``TRACES``).

A slice is ``count`` consecutive requests from ``offset``; its arrival gaps are scaled so
that its mean rate is the target rate (in model requests per second), which keeps the
trace's own burstiness. Token counts are used as they are (prompt capped so that prompt +
output fits the simulator's ``max_model_len``); Mooncake requests keep their ``hash_ids``
(one per 512-token prompt block) for ``shared_prompts``. Traces: Azure, CC BY 4.0, Patel et al.,
"Splitwise", ISCA 2024; Mooncake, Apache-2.0, Qin et al., FAST 2025 (see ``data/traces``).

A slice's requests are not the trace's average: a stretch of long answers holds more work
than its request count says. ``arrivals_at_load`` therefore sets the rate from the work
the slice holds, so that a "90%" replay offers 90% of the fleet's capacity in work and not
only in requests.
"""

from __future__ import annotations

import csv
import gzip
import itertools
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from director.datasets import trace_path
from regions.simulator.config import EngineConfig

TRACE = trace_path("azure-llm-2023/AzureLLMInferenceTrace_conv.csv.gz")
MAX_MODEL_LEN = 16_384
TRACES = {
    "azure-conv": "azure-llm-2023/AzureLLMInferenceTrace_conv.csv.gz",
    "azure-code": "azure-llm-2023/AzureLLMInferenceTrace_code.csv.gz",
    "mooncake-conv": "mooncake-fast25-conversation/conversation_trace.first45min.jsonl.gz",
}


@dataclass(frozen=True)
class TraceRequest:
    arrival: float  # seconds since the first request of the trace
    prompt_tokens: int
    output_tokens: int
    # Mooncake: one id per 512-token block of the prompt, equal ids for equal prefixes
    # (``shared_prompts``); empty for the Azure traces, which have none
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Arrival:
    at: float  # model seconds after the start of the replay
    prompt_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


def load_trace(path: Path = TRACE) -> list[TraceRequest]:
    """Every request of the trace, in arrival order."""
    rows: list[TraceRequest] = []
    first: datetime | None = None
    with gzip.open(path, "rt", newline="") as f:
        for row in csv.DictReader(f):
            stamp = datetime.fromisoformat(row["TIMESTAMP"][:26])  # 100 ns ticks -> us
            first = first or stamp
            output = int(row["GeneratedTokens"])
            prompt = min(int(row["ContextTokens"]), MAX_MODEL_LEN - output)
            rows.append(TraceRequest((stamp - first).total_seconds(), prompt, output))
    return rows


def load_named(name: str, max_model_len: int = MAX_MODEL_LEN) -> list[TraceRequest]:
    """The trace ``name`` (a key of ``TRACES``), prompts capped to fit ``max_model_len``."""
    path = trace_path(TRACES[name])
    if name.startswith("azure"):
        return [TraceRequest(r.arrival, min(r.prompt_tokens, max_model_len - r.output_tokens),
                             r.output_tokens) for r in load_trace(path)]
    rows: list[TraceRequest] = []
    with gzip.open(path, "rt") as f:
        for line in f:
            item = json.loads(line)
            output = int(item["output_length"])
            prompt = min(int(item["input_length"]), max_model_len - output)
            rows.append(TraceRequest(int(item["timestamp"]) / 1000.0, prompt, output,
                                     tuple(item.get("hash_ids", ()))))
    return rows


def replay(trace: list[TraceRequest], offset: int, count: int, rate: float) -> list[Arrival]:
    """``count`` requests from ``offset`` (wrapping), compressed to ``rate`` requests/s."""
    if count < 2 or rate <= 0:
        raise ValueError("replay: need at least 2 requests and a positive rate")
    picked = [trace[(offset + i) % len(trace)] for i in range(count)]
    gaps = [0.0] + [
        max(0.0, b.arrival - a.arrival) for a, b in itertools.pairwise(picked)
    ]
    span = sum(gaps)
    # the slice's n-1 gaps cover count-1 inter-arrival intervals at the target rate
    scale = (count - 1) / rate / span if span > 0 else 0.0
    out: list[Arrival] = []
    at = 0.0
    for gap, r in zip(gaps, picked, strict=True):
        at += gap * scale
        out.append(Arrival(at, r.prompt_tokens, r.output_tokens, r.hash_ids))
    return out


def work_seconds(prompt_tokens: int, output_tokens: int, config: EngineConfig) -> float:
    """Model seconds one request occupies a speed-1.0 server at a full batch: its prefill
    (which stalls the batch) plus its share of the full batch's decode steps."""
    per_token = config.decode_step_seconds(config.max_num_seqs) / config.max_num_seqs
    return config.prefill_seconds(prompt_tokens) + output_tokens * per_token


@dataclass(frozen=True)
class Slice:
    arrivals: list[Arrival]
    rate: float  # mean arrival rate of the slice, requests per model second
    demand: float  # work arriving before ``until`` as a share of the fleet's capacity


def arrivals_at_load(
    trace: list[TraceRequest],
    offset: int,
    load: float,
    capacity: float,
    until: float,
    span: float,
    config: EngineConfig | None = None,
    rounds: int = 8,
) -> Slice:
    """The slice from ``offset``, covering ``span`` model seconds, at the rate at which the
    work arriving before ``until`` is ``load`` of a fleet serving ``capacity`` average trace
    requests per second. The rate is refined a few rounds (the slice's make-up changes with
    its length) until the demand is within 1% of ``load``."""
    config = config or EngineConfig()
    mean_work = sum(work_seconds(r.prompt_tokens, r.output_tokens, config) for r in trace) / len(
        trace
    )
    capacity_work = capacity * mean_work  # work seconds the fleet serves per model second
    rate = load * capacity
    best: Slice | None = None
    for _ in range(rounds):
        arrivals = replay(trace, offset, max(2, round(rate * span)), rate)
        work = sum(
            work_seconds(a.prompt_tokens, a.output_tokens, config) for a in arrivals if a.at < until
        )
        demand = work / until / capacity_work
        current = Slice(arrivals, rate, demand)
        if best is None or abs(demand - load) < abs(best.demand - load):
            best = current
        if abs(demand - load) <= 0.01 * load or demand <= 0:
            break
        rate *= load / demand
    assert best is not None
    return best
