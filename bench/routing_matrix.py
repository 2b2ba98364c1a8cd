# SPDX-License-Identifier: Apache-2.0
"""The routing matrix in virtual time: every cell of ``benchkit/matrix.py``, trace slices at
fresh offsets (``--first-seed``; seeds 1-3 are the ones earlier decisions were tuned on),
ours against HAProxy's ``leastconn`` (``benchkit/des.py``), per-cell medians of per-slice
ratios with bootstrap intervals, pooled geometric means with cluster-bootstrap intervals, and
the floor checked on the interval: met, missed, or undecided where it straddles. With
``--budget N`` a cell whose floor is undecided gets another slice, up to N in all.

Each cell's load is a share of its fleet's capacity on its trace, measured the way
``benchkit/capacity.py`` measures a server (each distinct server saturated alone in
virtual time; cached in ``bench/.cache``). Slices are set to that load in work, not only in
requests (``routing_trace.arrivals_at_load``). Requests arriving in the first ``WARMUP_S``
are not counted; p99s are over the next ``MEASURE_S``.

::

    python bench/routing_matrix.py --cells "slots=16,256;speeds=mixed;load=0.9"
    python bench/routing_matrix.py --cells "speeds=mixed" --budget 9   # sequential slices
    python bench/routing_matrix.py --cells "trace=azure-conv" --setups "ours;ours:NAME=..."
    python bench/routing_matrix.py --out bench/results/DATE-matrix-des.md   # the whole matrix
    python bench/routing_matrix.py --recheck bench/results/DATE-matrix-des.jsonl \
        --measure 600 --setups "ours;leastconn-shifted"     # its floor misses, longer slices

``--setups`` adds variants of ours (``ours:scorers=queue-depth=1+outstanding-work=2``,
``ours:capacity=off`` for no capacity learning, ``ours:size-aware.hold=0``), and
``leastconn-shifted`` (leastconn with other tie-breaks: its ratios are the benchmark's noise,
what an identical policy scores against leastconn); the one-screen
summary prints each variant's worst and median cell. ``--jobs 2`` runs two cells at once.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchkit.matrix import parse_cells
from benchkit.routing_matrix import (
    FIRST_SEED,
    MEASURE_S,
    SLICES,
    line,
    missed_floor,
    pooled_by,
    run_cell,
    summarise,
)
from regions.balancer.scheduling.registry import DEFAULT_SCORERS


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", default="", help="sub-matrix, e.g. 'slots=16;load=0.9'")
    parser.add_argument("--setups", default="ours", help="';'-separated setups of ours")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--first-seed", type=int, default=FIRST_SEED,
                        help="seed of the first slice's offset (default %(default)s: slices "
                        "nobody tuned on; 1 repeats the earlier runs' slices)")
    parser.add_argument("--slices", type=int, default=SLICES,
                        help="slices per cell to start with (default %(default)s)")
    parser.add_argument("--budget", type=int, default=0,
                        help="add slices to a cell while its floor is undecided, up to this "
                        "many in all (default: none added)")
    parser.add_argument("--measure", type=float, default=MEASURE_S,
                        help="model seconds counted per slice (default %(default)g); the "
                        "p99s of the default window move by 10-100%% from slice to slice")
    parser.add_argument("--out", type=Path, help="write the raw results (FILE.jsonl) and the "
                        "summary (FILE.md)")
    parser.add_argument("--summarise", type=Path, metavar="RAW",
                        help="print the summary of earlier raw results (a .jsonl) and stop")
    parser.add_argument("--by", default="", metavar="DIMS",
                        help="with --summarise: pooled ratios per group of cells alike in "
                        "these comma-separated dimensions, e.g. lengths,load")
    parser.add_argument("--recheck", type=Path, metavar="RAW",
                        help="only the cells (of --cells) where the first setup of earlier "
                        "raw results missed the floor, e.g. again with a longer --measure")
    args = parser.parse_args()
    if args.summarise:
        earlier = [json.loads(row) for row in args.summarise.read_text().splitlines() if row]
        first = earlier[0]["slices"][0] if earlier else {}
        names = [k for k, v in first.items() if isinstance(v, dict) and k != "leastconn"]
        print(summarise(earlier, names))
        if args.by:
            print(pooled_by(earlier, names, args.by.split(",")))
        return 0
    cells = parse_cells(args.cells)
    if args.recheck:
        cells = [c for c in cells if c.label in missed_floor(args.recheck)]
    setups = [s for s in args.setups.split(";") if s]
    seeds = list(range(args.first_seed, args.first_seed + args.slices))
    print(f"{len(cells)} cells x {args.slices} slices (seeds {seeds[0]}-{seeds[-1]}"
          f"{f', up to {args.budget} while undecided' if args.budget else ''}) x "
          f"{len(setups) + 1} setups (default scorers {DEFAULT_SCORERS})", flush=True)
    done: list[dict] = []
    raw = args.out.with_suffix(".jsonl") if args.out else None
    with concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_cell, cell, setups, args.measure, seeds, args.budget)
                   for cell in cells]
        for future in concurrent.futures.as_completed(futures):
            cell = future.result()
            done.append(cell)
            for setup in setups:
                print(line(cell, setup), flush=True)
            if raw is not None:
                with raw.open("a") as f:
                    f.write(json.dumps(cell) + "\n")
    summary = summarise(done, setups)
    print(summary)
    if args.out:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        lines = [f"# Routing matrix in virtual time, {stamp}", "",
                 f"Command: `python bench/routing_matrix.py --cells '{args.cells}' --setups "
                 f"'{args.setups}' --measure {args.measure:g} --first-seed {args.first_seed} "
                 f"--slices {args.slices} --budget {args.budget}"
                 f"{f' --recheck {args.recheck}' if args.recheck else ''}`", "", "```",
                 *(line(c, s) for c in done for s in setups),
                 "```", "", "```", summary, "```", ""]
        args.out.with_suffix(".md").write_text("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
