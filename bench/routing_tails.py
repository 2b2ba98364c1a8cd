# SPDX-License-Identifier: Apache-2.0
"""Who makes a setup's p99: the slowest 1% of requests of a routing run, taken apart.

Reads the JSON lines that ``bench/routing.py --dump`` (live) or ``bench/routing_des.py
--dump`` (virtual time) append, and prints per setup and slice (``seed`` in the DES,
``repeat`` live), over the requests that arrived in the counted window:

- ``ttft`` / ``e2e``: the p99, then the slowest 1% by that measure: how many ran on GPUs of
  each speed (``1.0:3 0.6:8``), their median prompt and output tokens, and the median
  seconds they waited in the balancer before being sent (``queued``; DES only);
- ``decode``: per GPU speed, the median and 90th percentile milliseconds per output token
  after the first, of the answers over ``--long`` tokens (prefill stalls and batch size
  show here, against the simulator's 19.2 ms / speed at a full batch).

::

    .venv/bin/python bench/routing_des.py --loads 0.9 --seeds 1-8 --max-tokens exact \\
        --dump /tmp/des.jsonl
    .venv/bin/python bench/routing_tails.py /tmp/des.jsonl

Live dumps name the backend for our balancer only; the peers' rows show ``?`` speeds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from routing import FLEET, pct
from routing_des import MEASURE_S, WARMUP_S

SPEEDS = dict(FLEET)

Row = dict[str, object]


def load(path: Path, window: tuple[float, float]) -> dict[tuple[str, int], list[Row]]:
    """Completed counted requests per (setup, slice)."""
    lo, hi = window
    runs: dict[tuple[str, int], list[Row]] = defaultdict(list)
    with path.open() as f:
        for line in f:
            row = json.loads(line)
            if row.get("e2e") is None or not lo <= row["at"] < hi:
                continue
            key = (str(row["setup"]), int(row.get("seed", row.get("repeat", 0))))
            runs[key].append(row)
    return runs


def speed(row: Row) -> str:
    s = SPEEDS.get(str(row.get("backend", "")))
    return "?" if s is None else f"{s:g}"


def median(values: Iterable[float]) -> float:
    values = list(values)
    return statistics.median(values) if values else float("nan")


def slowest(rows: list[Row], key: str, share: float) -> tuple[float, str]:
    """(the p99 of ``key``, the make-up of the slowest ``share`` of the rows)."""
    ordered = sorted(rows, key=lambda r: -float(r[key]))
    top = ordered[: max(1, round(share * len(ordered)))]
    speeds = Counter(speed(r) for r in top)
    mix = " ".join(f"{s}:{n}" for s, n in sorted(speeds.items(), reverse=True))
    queued = [float(r["queued"]) for r in top if "queued" in r]
    text = (
        f"{mix:<16} prompt {median(r['prompt_tokens'] for r in top):5.0f}"
        f"  out {median(r['output_tokens'] for r in top):4.0f}"
    )
    if queued:
        text += f"  queued {median(queued):4.2f}"
    return pct([float(r[key]) for r in rows], 99), text


def decode_ms(rows: list[Row], long: int) -> str:
    per: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        tokens = int(r["output_tokens"])
        if tokens > long:
            per[speed(r)].append(1000 * (float(r["e2e"]) - float(r["ttft"])) / (tokens - 1))
    return "  ".join(
        f"{s}: {median(v):4.1f} / {pct(v, 90):4.1f}" for s, v in sorted(per.items(), reverse=True)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("dump", type=Path, nargs="+")
    parser.add_argument(
        "--window",
        default=f"{WARMUP_S:g},{WARMUP_S + MEASURE_S:g}",
        help="counted arrivals, model seconds LO,HI (default: the DES's)",
    )
    parser.add_argument("--share", type=float, default=0.01, help="the slowest share shown")
    parser.add_argument("--long", type=int, default=200, help="answers counted in decode")
    args = parser.parse_args()
    lo, _, hi = args.window.partition(",")
    for path in args.dump:
        runs = load(path, (float(lo), float(hi)))
        for (setup, piece), rows in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            ttft, ttft_mix = slowest(rows, "ttft", args.share)
            e2e, e2e_mix = slowest(rows, "e2e", args.share)
            print(f"{setup} slice {piece} ({len(rows)} requests)")
            print(f"  ttft p99 {ttft:5.2f}  slowest: {ttft_mix}")
            print(f"  e2e  p99 {e2e:5.1f}  slowest: {e2e_mix}")
            print(f"  decode ms/token (median / p90): {decode_ms(rows, args.long)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
