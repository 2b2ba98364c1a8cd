# SPDX-License-Identifier: Apache-2.0
"""How well the balancer learns its GPUs' speeds (``FleetSpeed``), in virtual time: each cell
of ``benchkit/matrix.py`` (six servers, slot counts and speeds known), a trace slice at the
cell's load for ``--window`` model seconds through our balancer, then the learned speed
ratios (to the first server) against the true ones.

Per cell and seed: the largest error of a ratio on a mixed-speed fleet (the goal: within
10 % in 60 s at 50 % load or more), or on a uniform fleet whether any server was called
different (the goal: none); then how many cells met each::

    python bench/speed_estimate.py --cells "lengths=hidden" --seeds 101-103
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchkit.matrix import parse_cells
from benchkit.speed_check import learned_speeds

GOAL = 0.10


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", default="lengths=hidden")
    parser.add_argument("--seeds", default="101-103", help="FIRST-LAST slice seeds")
    parser.add_argument("--window", type=float, default=60.0, help="model seconds of load")
    args = parser.parse_args()
    first, _, last = args.seeds.partition("-")
    seeds = range(int(first), int(last or first) + 1)
    mixed_ok = mixed_all = uniform_ok = uniform_all = 0
    for cell in parse_cells(args.cells):
        servers = cell.servers()
        for seed in seeds:
            speeds = learned_speeds(cell, seed, args.window)
            if any(s.name not in speeds for s in servers):
                print(f"{cell.label} seed {seed}: a server had no stream", flush=True)
                continue
            samples = min(speeds[s.name].samples for s in servers)
            if cell.speeds == "uniform":
                called = [s.name for s in servers if speeds[s.name].used != 1.0]
                uniform_all += 1
                uniform_ok += not called
                print(f"{cell.label} seed {seed}: uniform, called different: "
                      f"{', '.join(called) or 'none'} (>= {samples} streams each)", flush=True)
                continue
            ref = speeds[servers[0].name].estimate
            errors = [speeds[s.name].estimate / ref / (s.speed / servers[0].speed) - 1
                      for s in servers]
            worst = max(errors, key=abs)
            mixed_all += 1
            mixed_ok += abs(worst) <= GOAL
            print(f"{cell.label} seed {seed}: worst ratio error {worst:+.0%} "
                  f"({' '.join(f'{e:+.0%}' for e in errors)}; >= {samples} streams each)",
                  flush=True)
    print(f"mixed-speed fleets within {GOAL:.0%}: {mixed_ok}/{mixed_all}; uniform fleets "
          f"called alike: {uniform_ok}/{uniform_all} ({args.window:g} model seconds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
