# SPDX-License-Identifier: Apache-2.0
"""Stream migration in the virtual-time routing replay: does moving running answers from
slow GPUs to fast ones reach the issue's 90% goals, where placement alone does not
(``bench/routing_oracle.py``)?

``migrate:T=S[+E=S][+M=S][+H=1]`` places like ``oracle-ttft`` (a central queue, the GPU
where the request finishes soonest among those whose first token comes within ``T``), then,
whenever a slot is free on a faster GPU and no request is waiting for one, moves the running
answer that gains most from it: the proxy drops the stream on the slow GPU and sends the
prompt plus the tokens generated so far to the fast one, asking for the rest (recompute, as
a vLLM preemption does; the client sees one stream). The gain is the remaining decode time
saved minus the new prefill; a move needs ``M`` seconds of gain (default 1).

With ``H=1`` the remaining length is hidden: a stream's expected remainder is taken as the
tokens it has already generated (a long answer so far is likely a long answer), which is
what a proxy that is not told the lengths could use.

::

    .venv/bin/python bench/routing_migration.py --seeds 1-8 --max-tokens exact \\
        --setups "migrate:T=0.1;oracle-ttft:T=0.1"

With ``Q=1`` a move is made even while requests wait for a slot (they get the slow slot the
move frees).

Measured 2026-11-24, 90% load, seeds 1-8, exact lengths in the requests, medians of the
ratios to HAProxy's p99 (TTFT, E2E)::

    setup                                  TTFT   E2E
    oracle-ttft:T=0.1  (no moves)         0.75x  0.85x
    migrate:T=0.1                         0.98x  0.81x
    migrate:T=0.1+M=3                     1.12x  0.82x
    migrate:T=0.1+Q=1                     5.78x  0.81x
    migrate:T=0.1+Q=1+M=5                 1.74x  0.76x
    migrate:T=0.3+Q=1+E=16                6.00x  0.80x
    migrate:T=0.1+H=1                     1.01x  0.85x
    migrate:T=0.1+H=1+Q=1+M=5             1.17x  0.79x

Moves cut the long answers' time, but each costs a prefill of the prompt and the answer so
far on the fast GPU, which delays that GPU's new requests' first tokens; and at 90% load a
fast slot is seldom free while no request waits. No setting gets near 0.6x E2E.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import routing_des
import routing_oracle
from routing_trace import Arrival

from regions.simulator.engine import Engine

SLOTS = routing_oracle.SLOTS


@dataclass
class _Stream:
    arrival: Arrival
    gpu: str
    generated: int = 0
    move_to: str | None = None


class Migrating(routing_oracle.TtftFirst):
    """``oracle-ttft`` placement, then moves of running answers to faster free slots."""

    def __init__(self, engines: dict[str, Engine], params: dict[str, float]) -> None:
        super().__init__(engines, params)
        self.streams: dict[int, _Stream] = {}
        self.moves = 0

    def note(self) -> str:
        return f" [holds {self.holds}, moves {self.moves}]"

    async def send(self, a: Arrival, max_tokens: int | None) -> tuple[str, Callable[[], None],
                                                                       routing_des.Learn]:
        name, _, learn = await super().send(a, max_tokens)
        stream = self.streams[id(a)] = _Stream(a, name)

        def release() -> None:
            del self.streams[id(a)]
            self.free(stream.move_to or stream.gpu)
            if stream.move_to is not None:
                self.free(stream.gpu)
            self._rebalance()

        return name, release, learn

    def _remaining(self, stream: _Stream) -> float:
        if self.params.get("H"):
            return float(stream.generated)
        return float(max(1, stream.arrival.output_tokens) - stream.generated)

    def _rebalance(self) -> None:
        if any(self.aiming.values()) and not self.params.get("Q"):
            return  # a request is waiting for a slot: it gets the free one
        min_gain = self.params.get("M", 1.0)
        for target in sorted(self.names, key=lambda n: -self.engines[n].config.speed):
            if self.bound[target] >= SLOTS:
                continue
            fast = self.engines[target].config
            best: tuple[float, _Stream] | None = None
            for stream in self.streams.values():
                source = self.engines[stream.gpu].config
                if stream.move_to is not None or source.speed >= fast.speed:
                    continue
                remaining = self._remaining(stream)
                batch = len(self.engines[stream.gpu]._sched.running)
                gain = remaining * (source.decode_step_seconds(max(1, batch))
                                    - fast.decode_step_seconds(self.bound[target] + 1))
                gain -= fast.prefill_seconds(stream.arrival.prompt_tokens + stream.generated)
                if gain >= min_gain and (best is None or gain > best[0]):
                    best = (gain, stream)
            if best is not None:
                stream = best[1]
                stream.move_to = target
                self.bound[target] += 1
                self.moves += 1

    async def stream(self, engines: dict[str, Engine], name: str, a: Arrival) -> AsyncIterator[int]:
        record = self.streams[id(a)]
        output = max(1, a.output_tokens)
        engine = engines[name]
        seq = engine.submit(a.prompt_tokens, output)
        index = 0
        while True:
            async for _ in engine.stream(seq):
                record.generated += 1
                yield index
                index += 1
                if record.move_to is not None:
                    break
            if record.move_to is None or record.generated >= output:
                return
            engine.abort(seq)
            self.free(record.gpu)
            record.gpu, record.move_to = record.move_to, None
            engine = engines[record.gpu]
            seq = engine.submit(a.prompt_tokens + record.generated, output - record.generated)


routing_des.ROUTERS["migrate"] = lambda setup, engines: Migrating(
    engines, routing_oracle.params_of(setup))

if __name__ == "__main__":
    sys.exit(routing_des.main())
