# SPDX-License-Identifier: Apache-2.0
"""Slot-driven dispatch from a central queue, in the virtual-time routing replay: shortest
answer first, and slots on the fastest GPUs held back for long answers (an oracle: it knows
each answer's exact length).

``sjf:E=S[+S=1][+A=S][+W=S][+P=1][+R=N+L=N]``: requests wait in one queue; whenever a slot is
free (16 per GPU) the queue is served in order: with ``S=1`` (the default) shortest answer
first, except that a request waiting more than ``A`` seconds (default 1) goes before every
younger one, oldest first; with ``S=0`` in arrival order. The request taken gets a free GPU
on which it finishes within ``E`` seconds at a full batch: the slowest such (``P=0``, the
default) or the fastest (``P=1``). With ``R``, only answers of more than ``L`` tokens may take
the last ``R`` slots of the fastest GPUs. A request with no such GPU free waits for one,
unless it has waited ``W`` seconds (default 0.5), when it takes the fastest free GPU.

::

    .venv/bin/python bench/routing_sjf.py --seeds 1-8 --max-tokens exact --setups "sjf:E=16"

Measured 2026-11-24, 90% load, seeds 1-8, exact lengths, medians of the ratios to HAProxy's
p99 (TTFT, E2E); ``oracle-ttft:T=0.1`` (``bench/routing_oracle.py``) gave 0.75x / 0.85x::

    setup                                          TTFT   E2E
    sjf:E=16                                      1.18x  1.00x
    sjf:E=16+A=0.5+W=0.3                          1.20x  0.94x
    sjf:S=1+P=1+E=1000+A=1  (no size fit)         1.46x  0.94x
    sjf:S=0+P=1+E=16+R=4+L=450+W=5                2.18x  0.73x
    sjf:S=0+P=1+E=16+R=4+L=450+W=0.5              1.87x  0.77x
    sjf:S=0+P=0+E=16+R=4+L=450+W=5                2.19x  0.75x
    sjf:S=1+P=1+E=16+R=4+L=450+W=5+A=3            2.43x  0.77x
    sjf:S=1+P=1+E=20+R=6+L=400+W=2+A=2            1.93x  0.90x

Shortest-first does not buy first tokens here: what a request waits for after it is bound
is the prefills queued on its GPU, which this dispatch ignores and ``oracle-ttft`` counts.
Holding fast slots for long answers buys E2E only as ``oracle-fit`` does, by making them
wait for those slots.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import routing_des
import routing_oracle
from routing import FLEET
from routing_trace import Arrival

from regions.simulator.engine import Engine

SLOTS = routing_oracle.SLOTS


class ShortestFirst(routing_des.Router):
    def __init__(self, engines: dict[str, Engine], params: dict[str, float]) -> None:
        self.engines = engines
        self.params = params
        self.names = sorted((n for n, _ in FLEET), key=lambda n: engines[n].config.speed)
        self.bound = dict.fromkeys(self.names, 0)
        self.waiting: list[tuple[Arrival, float, asyncio.Future]] = []
        self.holds = 0
        self._timer = False

    def note(self) -> str:
        return f" [holds {self.holds}]"

    def _finish(self, name: str, a: Arrival) -> float:
        config = self.engines[name].config
        return (config.prefill_seconds(a.prompt_tokens)
                + max(1, a.output_tokens) * config.decode_step_seconds(SLOTS))

    def _dispatch(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        age = self.params.get("A", 1.0)
        give_up = self.params.get("W", 0.5)
        limit = self.params.get("E", 16.0)
        if self.params.get("S", 1.0):
            self.waiting.sort(key=lambda w: (0, w[1]) if now - w[1] > age
                              else (1, w[0].output_tokens, w[1]))
        reserve = int(self.params.get("R", 0))
        long = self.params.get("L", 1e9)
        fastest = self.engines[self.names[-1]].config.speed
        taken = []
        for i, (a, since, future) in enumerate(self.waiting):
            free = [n for n in self.names if self.bound[n] < SLOTS]
            if not free:
                break
            cap = {n: SLOTS if a.output_tokens > long
                   or self.engines[n].config.speed < fastest else SLOTS - reserve
                   for n in free}
            fits = [n for n in free if self._finish(n, a) <= limit and self.bound[n] < cap[n]]
            if fits:
                name = fits[-1] if self.params.get("P") else fits[0]
            elif now - since >= give_up:
                name = free[-1]
            else:
                continue
            self.bound[name] += 1
            future.set_result(name)
            taken.append(i)
        for i in reversed(taken):
            del self.waiting[i]
        if self.waiting and not self._timer:
            # look again as waiters age past W or A
            self._timer = True
            loop.call_later(min(age, give_up) / 4, self._tick)

    def _tick(self) -> None:
        self._timer = False
        if self.waiting:
            self._dispatch()

    async def send(self, a: Arrival, max_tokens: int | None) -> tuple[str, Callable[[], None],
                                                                       routing_des.Learn]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        self.waiting.append((a, loop.time(), future))
        self._dispatch()
        if not future.done():
            self.holds += 1
        name = await future

        def release() -> None:
            self.bound[name] -= 1
            self._dispatch()

        return name, release, routing_des.nothing_learned


routing_des.ROUTERS["sjf"] = lambda setup, engines: ShortestFirst(
    engines, routing_oracle.params_of(setup))

if __name__ == "__main__":
    sys.exit(routing_des.main())
