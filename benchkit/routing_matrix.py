# SPDX-License-Identifier: Apache-2.0
"""The routing matrix in virtual time, cell by cell: every cell of ``benchkit.matrix``, trace
slices at fresh offsets (seeds from ``FIRST_SEED``, not the 1-3 earlier decisions were tuned
on), ours against HAProxy's ``leastconn`` (``benchkit.des``), ratios per slice, their median
with a bootstrap interval (``benchkit.intervals``), and the floor and goals checked per cell
on the interval: met, missed, or undecided where it straddles them. With a ``budget`` a cell
gets more slices while any of its floor intervals straddles (a sequential design). Beside
each p99 the mean of the worst 1 % (``tail``), which moves less from slice to slice.

Each cell's load is a share of its fleet's capacity on its trace, measured the way
``benchkit.capacity`` measures a server (each distinct server saturated alone in virtual
time; cached in ``bench/.cache``). Slices are set to that load in work, not only in requests
(``routing_trace.arrivals_at_load``). Requests arriving in the first ``WARMUP_S`` are not
counted; p99s are over the next ``MEASURE_S``. ``bench/routing_matrix.py`` runs it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import statistics
from pathlib import Path

from benchkit import des
from benchkit.capacity import measure_virtual
from benchkit.intervals import (
    Interval,
    Side,
    geomean_interval,
    holm,
    median_interval,
    sign_test_p,
    worst_share_mean,
)
from benchkit.matrix import CONTEXT, Cell
from benchkit.routing_trace import Slice, arrivals_at_load, load_named
from regions.balancer import BalancerConfig
from regions.simulator.config import EngineConfig

WARMUP_S = 20.0
MEASURE_S = 120.0
TAIL_S = 60.0
SLICES = 5
FIRST_SEED = 101  # slices 1-3 are the ones the defaults were chosen on
CACHE = Path(__file__).resolve().parents[1] / "bench" / ".cache" / "capacity.json"
FLOOR = {"ttft": 1.05, "e2e": 1.05, "throughput": 0.99}
HIGHER_IS_BETTER = ("throughput",)
# the floor as the routing-gains issue states it, against leastconn
POOLED_UPPER = 1.03  # the pooled 95 % upper bound of p99 TTFT and E2E
CELL_LOSS = 1.05  # no cell whose median is above this (sign test, Holm over the cells)
CELL_MEDIAN = 1.20  # no cell median above this
EVERY_SLICE = 1.10  # no cell with every slice above this
MIN_COUNTED = 1000  # counted requests per slice


def server_capacity(trace: str, config: EngineConfig) -> float:
    """Requests per model second one server of ``config`` sustains on ``trace`` (cached)."""
    key = f"{trace}|{sorted(dataclasses.asdict(config).items())}"
    cache = json.loads(CACHE.read_text()) if CACHE.exists() else {}
    if key not in cache:
        requests = [(r.prompt_tokens, r.output_tokens)
                    for r in load_named(trace, config.max_model_len)]
        result = asyncio.run(measure_virtual(
            config, requests, 2 * config.max_num_seqs, warmup=60.0, window=300.0))
        cache = json.loads(CACHE.read_text()) if CACHE.exists() else {}
        cache[key] = result.req_per_s
        CACHE.parent.mkdir(exist_ok=True)
        CACHE.write_text(json.dumps(cache, indent=1))
    return float(cache[key])


def fleet_capacity(cell: Cell) -> float:
    return sum(server_capacity(cell.trace, s.engine) for s in cell.servers())


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def stats(results: list[des.Result], speeds: dict[str, float],
          measure_s: float = MEASURE_S) -> dict[str, object]:
    counted = [r for r in results if WARMUP_S <= r.at < WARMUP_S + measure_s]
    ok = [r for r in counted if r.status == 200 and r.e2e is not None]
    by_speed: dict[str, int] = {}
    for r in ok:
        key = f"{speeds[r.backend]:g}"
        by_speed[key] = by_speed.get(key, 0) + 1
    ttfts = [r.ttft for r in ok if r.ttft is not None]
    e2es = [r.e2e for r in ok if r.e2e is not None]
    return {
        "ttft_p50": pct(ttfts, 50),
        "ttft_p99": pct(ttfts, 99),
        "ttft_worst1": worst_share_mean(ttfts),
        "e2e_p50": pct(e2es, 50),
        "e2e_p99": pct(e2es, 99),
        "e2e_worst1": worst_share_mean(e2es),
        "completed_per_s": len(ok) / measure_s,
        "shed": sum(r.status == 429 for r in counted),
        "errors": sum(r.status not in (200, 429) for r in counted),
        "counted": len(counted),
        "by_speed": {k: round(v / max(1, len(ok)), 3) for k, v in sorted(by_speed.items())},
    }


def config_of(setup: str) -> BalancerConfig:
    """``ours`` or ``ours:KEY=VALUE+...``: ``scorers=NAME~W/NAME~W``, ``filters=A/B``,
    ``picker=NAME``, ``capacity=off``
    (capacities never learned: nothing held), ``speeds=told`` (the servers' true speeds given,
    not learned: what learning them costs), ``capacity.FIELD=VALUE`` (``CapacityConfig``),
    ``outliers.FIELD=VALUE`` (``OutlierConfig``),
    ``NAME.PARAM=VALUE`` for a scorer."""
    name, _, params = setup.partition(":")
    if name != "ours":
        raise SystemExit(f"unknown setup {setup!r}")
    config = BalancerConfig()
    scorer_params: dict[str, dict[str, float]] = {}
    for item in filter(None, params.split("+")):
        key, _, value = item.partition("=")
        if key == "filters":
            config = dataclasses.replace(config, filters=tuple(value.split("/")))
        elif key == "scorers":
            pairs = [p.partition("~") for p in value.split("/") if p]
            config = dataclasses.replace(config, scorers=tuple(
                (n, float(w)) for n, _, w in pairs))
        elif key == "picker":
            config = dataclasses.replace(config, picker=value)
        elif key == "capacity" or (key, value) == ("speeds", "told"):
            continue  # read by scrape_of, told_of
        elif key.partition(".")[0] in ("capacity", "outliers"):
            part, _, field = key.partition(".")
            current = getattr(config, part)
            kind = type(getattr(current, field))
            config = dataclasses.replace(config, **{part: dataclasses.replace(
                current, **{field: kind(float(value))})})
        elif "." in key:
            scorer, _, param = key.partition(".")
            scorer_params.setdefault(scorer, {})[param] = float(value)
        else:
            raise SystemExit(f"unknown setup parameter {key!r} in {setup!r}")
    if scorer_params:
        config = dataclasses.replace(config, scorer_params=scorer_params)
    return config


def scrape_of(setup: str) -> bool:
    return "capacity=off" not in setup


def told_of(setup: str) -> bool:
    return "speeds=told" in setup


def run_cell(cell: Cell, setups: list[str], measure_s: float = MEASURE_S,
             seeds: list[int] | None = None, budget: int = 0) -> dict[str, object]:
    """Every slice of ``cell`` (one per seed) through every setup and ``leastconn``; then,
    up to ``budget`` slices in all, one more while the first setup's floor is undecided."""
    seeds = list(seeds) if seeds is not None else list(range(FIRST_SEED, FIRST_SEED + SLICES))
    trace = load_named(cell.trace, CONTEXT[cell.trace])
    capacity = fleet_capacity(cell)
    slices: list[dict[str, object]] = []
    result: dict[str, object] = {"cell": cell.to_json(), "label": cell.label,
                                 "capacity": capacity, "slices": slices}
    next_seed = max(seeds) + 1
    while seeds:
        slices.append(run_slice(cell, trace, capacity, seeds.pop(0), setups, measure_s))
        if not seeds and len(slices) < budget and undecided(result, setups[0]):
            seeds.append(next_seed)
            next_seed += 1
    return result


def run_slice(cell: Cell, trace: list, capacity: float, seed: int, setups: list[str],
              measure_s: float) -> dict[str, object]:
    """One trace slice (its offset drawn from ``seed``) through every setup and leastconn."""
    servers = cell.servers()
    speeds = {s.name: s.speed for s in servers}
    offset = random.Random(seed).randrange(len(trace))

    def window(measure: float) -> Slice:
        return arrivals_at_load(trace, offset, cell.load, capacity, until=WARMUP_S + measure,
                                span=WARMUP_S + measure + TAIL_S, config=servers[0].engine)

    piece = window(measure_s)
    for _ in range(4):  # a slow trace: a longer window from the same offset
        counted = sum(WARMUP_S <= a.at < WARMUP_S + measure_s for a in piece.arrivals)
        if counted >= MIN_COUNTED:
            break
        measure_s *= 1.02 * MIN_COUNTED / max(1, counted)
        piece = window(measure_s)
    fastest = max(servers, key=lambda s: s.speed).engine
    row: dict[str, object] = {
        "seed": seed, "offset": offset, "rate": piece.rate, "work": piece.demand,
        "measure_s": measure_s,
        # the TTFT no router can beat at p99: the p99 prompt prefilled alone on the fastest
        # GPU (prefix caching aside)
        "ttft_floor_s": pct([fastest.prefill_seconds(a.prompt_tokens) for a in piece.arrivals
                             if WARMUP_S <= a.at < WARMUP_S + measure_s], 99)}
    for setup in ["leastconn", *setups]:
        results = des.run("ours" if setup.startswith("ours") else setup, servers,
                          piece.arrivals, cell.max_tokens, WARMUP_S + measure_s,
                          config_of(setup) if setup.startswith("ours") else None,
                          scrape=scrape_of(setup), told=told_of(setup))
        row[setup] = stats(results, speeds, measure_s)
    return row


def ratios(cell: dict, setup: str, peer: str = "leastconn") -> dict[str, list[float]]:
    """Per-slice ratios of ``setup`` to ``peer``: p99 TTFT and E2E, throughput, and where
    the results carry them, the worst-1 % means (``ttft_tail``, ``e2e_tail``)."""
    out: dict[str, list[float]] = {"ttft": [], "e2e": [], "throughput": []}
    for s in cell["slices"]:
        ours, ref = s[setup], s[peer]
        out["ttft"].append(ours["ttft_p99"] / ref["ttft_p99"])
        out["e2e"].append(ours["e2e_p99"] / ref["e2e_p99"])
        out["throughput"].append(ours["completed_per_s"] / max(1e-9, ref["completed_per_s"]))
        for metric in ("ttft", "e2e"):
            if f"{metric}_worst1" in ours:
                out.setdefault(f"{metric}_tail", []).append(
                    ours[f"{metric}_worst1"] / ref[f"{metric}_worst1"])
    return out


def intervals(cell: dict, setup: str) -> dict[str, Interval]:
    """Each ratio's median over the cell's slices with its bootstrap interval."""
    return {metric: median_interval(values) for metric, values in ratios(cell, setup).items()}


def floor_sides(found: dict[str, Interval]) -> dict[str, Side]:
    """Per floor metric of a cell's ``intervals``: met, missed or undecided (its interval
    straddles the floor)."""
    return {metric: found[metric].side(limit, lower_is_better=metric not in HIGHER_IS_BETTER)
            for metric, limit in FLOOR.items()}


def undecided(cell: dict, setup: str) -> bool:
    return "undecided" in floor_sides(intervals(cell, setup)).values()


def verdict(cell: dict, setup: str,
            found: dict[str, Interval] | None = None) -> tuple[dict[str, float], list[str]]:
    """Medians of the per-slice ratios, and which floor conditions are not met (missed, or
    undecided: an interval that straddles the floor is not a pass); ``found``: the cell's
    ``intervals`` when the caller has them."""
    found = found or intervals(cell, setup)
    med = {k: v.point for k, v in found.items()}
    names = {"ttft": "ttft", "e2e": "e2e", "throughput": "req/s"}
    failed = [names[m] + ("?" if side == "undecided" else "")
              for m, side in floor_sides(found).items() if side != "met"]
    if any(s[setup]["shed"] or s[setup]["errors"] for s in cell["slices"]):
        failed.append("errors")
    return med, failed


def goal_side(cell: dict, found: dict[str, Interval]) -> Side | None:
    """The gain goal of a mixed-speed cell (p99 TTFT and E2E ratios at once): 90% load,
    hidden lengths 0.9x / 0.8x, declared 0.8x / 0.7x; 70% load 0.8x / 0.8x; judged on the
    intervals (met only when both are wholly under). None for other cells."""
    c = cell["cell"]
    if c["speeds"] != "mixed":
        return None
    if c["load"] >= 0.9:
        ttft, e2e = (0.9, 0.8) if c["lengths"] == "hidden" else (0.8, 0.7)
    else:
        ttft, e2e = 0.8, 0.8
    sides = {found["ttft"].side(ttft), found["e2e"].side(e2e)}
    return "missed" if "missed" in sides else "undecided" if "undecided" in sides else "met"


def line(cell: dict, setup: str) -> str:
    found = intervals(cell, setup)
    _, failed = verdict(cell, setup, found)
    flag = "FLOOR " + ",".join(failed) if failed else "ok"
    tail = "".join(f" {name} {found[key].text()}x" for key, name in
                   (("ttft_tail", "TTFT-tail"), ("e2e_tail", "E2E-tail")) if key in found)
    floors = [s["ttft_floor_s"] / s["leastconn"]["ttft_p99"] for s in cell["slices"]
              if "ttft_floor_s" in s]
    floor = f" (TTFT floor {statistics.median(floors):.2f}x)" if floors else ""
    return (f"{cell['label']:<88} {setup:<28} n={len(cell['slices'])} TTFT "
            f"{found['ttft'].text()}x{floor} E2E {found['e2e'].text()}x req/s "
            f"{found['throughput'].text(3)}x{tail}  {flag}")


def missed_floor(raw: Path) -> set[str]:
    """Labels of the cells of ``raw`` (a .jsonl) where its first setup missed the floor."""
    missed = set()
    for row in raw.read_text().splitlines():
        if not row:
            continue
        cell = json.loads(row)
        first = next(k for k, v in cell["slices"][0].items()
                     if isinstance(v, dict) and k != "leastconn")
        if verdict(cell, first)[1]:
            missed.add(cell["label"])
    return missed


def summarise(cells: list[dict], setups: list[str]) -> str:
    """Per setup: cells whose floor is met, missed or undecided; each ratio pooled over the
    cells (geometric mean, cluster-bootstrap interval); the worst and best cell."""
    out = []
    for setup in setups:
        found = [intervals(c, setup) for c in cells]
        sides = [floor_sides(f) for f in found]
        errors = sum(any(s[setup]["shed"] or s[setup]["errors"] for s in c["slices"])
                     for c in cells)
        met = sum(all(v == "met" for v in s.values()) for s in sides)
        missed = sum(any(v == "missed" for v in s.values()) for s in sides)
        out.append(f"{setup}: floor met in {met}/{len(cells)} cells, missed in {missed}, "
                   f"undecided in {len(cells) - met - missed}; {errors} with shed or errors; "
                   f"{sum(len(c['slices']) for c in cells)} slices")
        per_cell = [ratios(c, setup) for c in cells]
        for metric in ("ttft", "e2e", "throughput", "ttft_tail", "e2e_tail"):
            clusters = [r[metric] for r in per_cell if metric in r]
            if not clusters:
                continue
            pooled = geomean_interval(clusters)
            medians = [(statistics.median(r[metric]), c["label"])
                        for r, c in zip(per_cell, cells, strict=True) if metric in r]
            worst = min(medians) if metric in HIGHER_IS_BETTER else max(medians)
            best = max(medians) if metric in HIGHER_IS_BETTER else min(medians)
            out.append(f"  {metric:<10} pooled {pooled.text(3)}x; worst cell {worst[0]:.2f}x "
                       f"({worst[1]}); best {best[0]:.2f}x ({best[1]})")
        out.extend("  " + text for text in floor_goals(cells, setup))
        goals = [side for side in (goal_side(c, f) for c, f in zip(cells, found, strict=True))
                 if side is not None]
        if goals:
            out.append(f"  mixed-speed gain goals met in {goals.count('met')}/{len(goals)} "
                       f"cells, missed in {goals.count('missed')}")
    return "\n".join(out)


def floor_goals(cells: list[dict], setup: str) -> list[str]:
    """The floor of the routing-gains issue, each line ``held`` or ``NOT held``: pooled
    upper bounds, Holm-corrected cell losses, cell medians, cells worse in every slice,
    throughput, sheds, and whether the slices were big and many enough to judge."""
    per_cell = [ratios(c, setup) for c in cells]
    lines = []
    for metric in ("ttft", "e2e"):
        pooled = geomean_interval([r[metric] for r in per_cell])
        lost = holm([sign_test_p(r[metric], CELL_LOSS) for r in per_cell])
        losers = [c["label"] for c, x in zip(cells, lost, strict=True) if x]
        high = [c["label"] for c, r in zip(cells, per_cell, strict=True)
                if statistics.median(r[metric]) > CELL_MEDIAN]
        every = [c["label"] for c, r in zip(cells, per_cell, strict=True)
                 if min(r[metric]) > EVERY_SLICE]
        ok = pooled.high <= POOLED_UPPER and not (losers or high or every)
        lines.append(f"{_held(ok)} {metric}: pooled upper bound {pooled.high:.3f} (<= "
                     f"{POOLED_UPPER}); {len(losers)} cells above {CELL_LOSS} (Holm); "
                     f"{len(high)} medians above {CELL_MEDIAN}; {len(every)} cells with every "
                     f"slice above {EVERY_SLICE}"
                     + "".join(f"\n      {label}" for label in sorted({*losers, *high, *every})))
    throughput = geomean_interval([r["throughput"] for r in per_cell])
    lines.append(f"{_held(throughput.point >= FLOOR['throughput'])} throughput: pooled "
                 f"{throughput.text(3)} (>= {FLOOR['throughput']})")
    shed = [c["label"] for c in cells if c["cell"]["load"] < 1
            and any(s[setup]["shed"] or s[setup]["errors"] for s in c["slices"])]
    lines.append(f"{_held(not shed)} no 429 or error below capacity: {len(shed)} cells")
    counted = min(s[setup]["counted"] for c in cells for s in c["slices"])
    fewest = min(len(c["slices"]) for c in cells)
    lines.append(f"{_held(counted >= MIN_COUNTED and fewest >= SLICES)} enough to judge: "
                 f">= {counted} counted requests a slice (>= {MIN_COUNTED}), >= {fewest} slices "
                 f"a cell (>= {SLICES})")
    return lines


def _held(ok: bool) -> str:
    return "held" if ok else "NOT held"


def pooled_by(cells: list[dict], setups: list[str], dimensions: list[str]) -> str:
    """Per group of cells alike in ``dimensions`` (e.g. lengths and load) and per setup, the
    pooled geometric means of p99 TTFT and E2E ratios with cluster-bootstrap intervals."""
    groups: dict[tuple, list[dict]] = {}
    for c in cells:
        groups.setdefault(tuple(c["cell"][d] for d in dimensions), []).append(c)
    out = []
    for key, members in sorted(groups.items()):
        label = " ".join(f"{d}={v}" for d, v in zip(dimensions, key, strict=True))
        out.append(f"{label} ({len(members)} cells)")
        for setup in setups:
            per_cell = [ratios(c, setup) for c in members]
            ttft = geomean_interval([r["ttft"] for r in per_cell])
            e2e = geomean_interval([r["e2e"] for r in per_cell])
            out.append(f"  {setup:<44} TTFT {ttft.text()}x  E2E {e2e.text()}x")
    return "\n".join(out)
