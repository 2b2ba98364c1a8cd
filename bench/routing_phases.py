# SPDX-License-Identifier: Apache-2.0
"""Phases of long answers: how many a slice's fast and medium GPUs cannot start in time
even if they served nothing else.

The routing DES's slices (``bench/routing_des.py``: same seeds, same load) have stretches
where many answers of several hundred tokens arrive together. Such an answer meets the
issue's E2E goal (0.6x HAProxy's p99) only on a fast or medium GPU, and its first token
meets the TTFT goal (0.8x HAProxy's p99) only if a slot there frees soon enough. This script
bounds that from the trace alone, in the long answers' favour:

- only the answers over ``--long`` tokens use the fast and medium GPUs (16 slots each, as
  the simulator), every other request goes elsewhere at no cost to them;
- they are served first come, first served, each on the slot where it would finish
  soonest, decoding at the full-batch step (``12 ms * 1.6 / speed``), with no prefill and
  no stall;
- a long answer that would wait longer than ``--ttft`` seconds for such a slot must either
  wait (its first token misses the goal) or start on a 0.4 GPU, where at a full batch it
  takes ``tokens * 48 ms``: if that is over ``--e2e`` seconds it misses the E2E goal.

Per slice it prints the long answers, how many wait past the TTFT goal in this model
("late"), and how many of those would also miss the E2E goal on a 0.4 GPU ("forced": each
misses one goal whatever is done with it), against 1% of the slice's counted requests,
which is all the room a p99 has. The goals default to 0.8x and 0.6x of HAProxy's p99 TTFT
and E2E in the DES at 90% (``HAPROXY_P99``, from a ``routing_des`` run's per-seed lines).

``split`` then gives the rest of the requests their due: the fast and medium GPUs take the
long answers and the prompts over ``--long-prompt`` tokens (their prefill is too slow on a
0.4 GPU for the first-token goal), the 0.4 GPUs everything else, each request on the slot
of its pool where its first token comes soonest (its own prefill, then full-batch decode
steps); it counts each pool's requests that miss the TTFT and the E2E goal.

::

    .venv/bin/python bench/routing_phases.py --seeds 1-8 --long 300

Measured 2026-11-24, 90%, seeds 1-8. With ``--long`` 250, 300 or 350, no long answer is
late in any slice (late 0, forced 0; 210 to 530 long answers per slice, up to 46% of the
requests): the stretches of long answers in the DES's tails (seed 2: fourteen answers of
about 400 tokens within 2 s, held 1.5 to 2 s for a fast or medium GPU) are not more than
those GPUs could start at once if they served nothing else. The split (``--long 350``)
shows why they do serve other requests: the 0.4 GPUs cannot take the rest::

    seed   1% of requests   fast+medium: TTFT / E2E misses   0.4 GPUs: TTFT / E2E misses
    1      11               1 / 12                           122 / 0
    2      11               0 / 10                           0 / 0
    3      15               0 / 4                            724 / 203
    4      16               0 / 6                            767 / 176
    5      17               0 / 3                            1121 / 774
    6      11               0 / 10                           0 / 0
    7      16               0 / 1                            1205 / 1185
    8      15               0 / 6                            882 / 40

Only seeds 2 and 6 fit the split, and with little room: it takes every decode step at the
full-batch time, with no prefill stall. In the DES, where the median long answer's step is
11 to 13% slower than that (``bench/routing_tails.py``: 21.4 ms on a 1.0 GPU, 36.3 ms on a
0.6), a hard split (the ``size-aware`` scorer sending what the 0.4 GPUs may take only
there) took seed 2's p99 TTFT from 1.60 s to 2.17 s with declared lengths: the fast and
medium GPUs were full of long answers and 7 to 12 more waited for them.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from routing import CAPACITY, FLEET
from routing_des import MEASURE_S, TAIL_LOAD_S, WARMUP_S, seeds_of
from routing_trace import Arrival, arrivals_at_load, load_trace

from regions.simulator.config import EngineConfig

# HAProxy leastconn's p99 (TTFT, E2E) per DES seed at 90% load, max_tokens exact
# (``routing_des.py --loads 0.9 --seeds 1-8 --max-tokens exact``, 2026-11-24)
HAPROXY_P99 = {
    1: (0.71, 26.5),
    2: (0.67, 26.8),
    3: (1.91, 29.0),
    4: (1.78, 29.8),
    5: (2.63, 29.0),
    6: (5.25, 30.1),
    7: (0.75, 24.1),
    8: (1.23, 29.9),
}


def full_batch_step_s(speed: float, config: EngineConfig) -> float:
    """Seconds per decode step of a full batch on a GPU of ``speed``."""
    return dataclasses.replace(config, speed=speed).decode_step_seconds(config.max_num_seqs)


def late_and_forced(
    arrivals: list[Arrival],
    counted: tuple[float, float],
    long: int,
    ttft_goal: float,
    e2e_goal: float,
    config: EngineConfig,
) -> tuple[int, int, int]:
    """(long answers counted, those waiting past ``ttft_goal``, those of them over
    ``e2e_goal`` on the slowest GPU too)."""
    speeds = [s for _, s in FLEET]
    slowest = min(speeds)
    steps = [full_batch_step_s(s, config) for s in speeds if s > slowest]
    slow_step = full_batch_step_s(slowest, config)
    # (time the slot frees, its step): every fast and medium slot, free at the start
    slots = [(0.0, step) for step in steps for _ in range(config.max_num_seqs)]
    lo, hi = counted
    total = late = forced = 0
    for a in arrivals:
        if a.output_tokens <= long:
            continue
        # the slot where it finishes soonest: among those free at arrival the fastest,
        # otherwise the first to free (the full-batch steps differ by under 2x, and a
        # long answer finishes sooner on a slot free now than one freeing seconds later)
        free = [s for s in slots if s[0] <= a.at]
        chosen = min(free, key=lambda s: s[1]) if free else min(slots)
        slots.remove(chosen)
        start = max(a.at, chosen[0])
        slots.append((start + a.output_tokens * chosen[1], chosen[1]))
        if not lo <= a.at < hi:
            continue
        total += 1
        if start - a.at > ttft_goal:
            late += 1
            if a.output_tokens * slow_step > e2e_goal:
                forced += 1
    return total, late, forced


@dataclass
class Pool:
    """What a split fleet's share did for the counted requests it served."""

    requests: int = 0
    ttft_misses: int = 0
    e2e_misses: int = 0


def split_fleet(
    arrivals: list[Arrival],
    counted: tuple[float, float],
    long: int,
    long_prompt: int,
    ttft_goal: float,
    e2e_goal: float,
    config: EngineConfig,
) -> tuple[Pool, Pool]:
    """The fleet split in two: answers over ``long`` tokens and prompts over
    ``long_prompt`` on the fast and medium GPUs, every other request on the slowest ones;
    in each, a request takes the slot where its first token comes soonest (its prefill
    alone, at the GPU's prefill rate), then decodes at the full-batch step.
    (fast and medium, slowest)."""
    slowest = min(s for _, s in FLEET)
    gpus = {s: dataclasses.replace(config, speed=s) for _, s in FLEET}
    steps = {s: full_batch_step_s(s, config) for s in gpus}
    slots = {
        big: [
            (0.0, s) for _, s in FLEET if (s > slowest) == big for _ in range(config.max_num_seqs)
        ]
        for big in (True, False)
    }
    pools = {True: Pool(), False: Pool()}
    lo, hi = counted
    for a in arrivals:
        big = a.output_tokens > long or a.prompt_tokens > long_prompt
        free = slots[big]
        firsts = [max(a.at, at) + gpus[s].prefill_seconds(a.prompt_tokens) for at, s in free]
        i = min(range(len(free)), key=firsts.__getitem__)
        speed = free[i][1]
        end = firsts[i] + (a.output_tokens - 1) * steps[speed]
        free[i] = (end, speed)
        if lo <= a.at < hi:
            pool = pools[big]
            pool.requests += 1
            pool.ttft_misses += firsts[i] - a.at > ttft_goal
            pool.e2e_misses += end - a.at > e2e_goal
    return pools[True], pools[False]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", default="1-8")
    parser.add_argument("--load", type=float, default=0.9)
    parser.add_argument("--long", type=int, default=300, help="answers over this many tokens")
    parser.add_argument("--ttft", type=float, default=0.8, help="goal: share of HAProxy's p99")
    parser.add_argument("--e2e", type=float, default=0.6, help="goal: share of HAProxy's p99")
    parser.add_argument(
        "--long-prompt", type=int, default=3000, help="split: prompts over this many tokens"
    )
    args = parser.parse_args()
    trace = load_trace()
    config = EngineConfig()
    counted = (WARMUP_S, WARMUP_S + MEASURE_S)
    print(
        f"load {args.load:.0%}, answers over {args.long} tokens on the fast and medium GPUs "
        f"only; goals {args.ttft}x / {args.e2e}x HAProxy's p99 TTFT / E2E"
    )
    for seed in seeds_of(args.seeds):
        if seed not in HAPROXY_P99:
            raise SystemExit(f"no HAProxy p99 recorded for seed {seed}")
        offset = random.Random(seed).randrange(len(trace))
        piece = arrivals_at_load(
            trace,
            offset,
            args.load,
            CAPACITY,
            until=counted[1],
            span=counted[1] + TAIL_LOAD_S,
        )
        n = sum(1 for a in piece.arrivals if counted[0] <= a.at < counted[1])
        ttft, e2e = HAPROXY_P99[seed]
        total, late, forced = late_and_forced(
            piece.arrivals, counted, args.long, args.ttft * ttft, args.e2e * e2e, config
        )
        big, small = split_fleet(
            piece.arrivals,
            counted,
            args.long,
            args.long_prompt,
            args.ttft * ttft,
            args.e2e * e2e,
            config,
        )
        print(
            f"  seed {seed}: {n} requests (1% = {n / 100:.0f}), {total} long; late {late}, "
            f"forced {forced}  (TTFT goal {args.ttft * ttft:.2f} s, E2E goal "
            f"{args.e2e * e2e:.1f} s)\n"
            f"    split: fast+medium {big.requests} (TTFT / E2E misses {big.ttft_misses} / "
            f"{big.e2e_misses}), slowest {small.requests} ({small.ttft_misses} / "
            f"{small.e2e_misses})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
