# SPDX-License-Identifier: Apache-2.0
"""The routing matrix in virtual time, cell by cell: every cell of ``benchkit.matrix``, three
trace slices each, ours against HAProxy's ``leastconn`` (``benchkit.des``), ratios per slice
and their median, and the floor and goals of the robust-balancer issue checked per cell.

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
from benchkit.matrix import CONTEXT, Cell
from benchkit.routing_trace import arrivals_at_load, load_named
from regions.balancer import BalancerConfig
from regions.simulator.config import EngineConfig

WARMUP_S = 20.0
MEASURE_S = 120.0
TAIL_S = 60.0
SLICES = 3
CACHE = Path(__file__).resolve().parents[1] / "bench" / ".cache" / "capacity.json"
FLOOR = {"ttft": 1.05, "e2e": 1.05, "throughput": 0.99}


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
    return {
        "ttft_p50": pct([r.ttft for r in ok if r.ttft is not None], 50),
        "ttft_p99": pct([r.ttft for r in ok if r.ttft is not None], 99),
        "e2e_p50": pct([r.e2e for r in ok if r.e2e is not None], 50),
        "e2e_p99": pct([r.e2e for r in ok if r.e2e is not None], 99),
        "completed_per_s": len(ok) / measure_s,
        "shed": sum(r.status == 429 for r in counted),
        "errors": sum(r.status not in (200, 429) for r in counted),
        "counted": len(counted),
        "by_speed": {k: round(v / max(1, len(ok)), 3) for k, v in sorted(by_speed.items())},
    }


def config_of(setup: str) -> BalancerConfig:
    """``ours`` or ``ours:KEY=VALUE+...``: ``scorers=NAME~W/NAME~W``, ``filters=A/B``,
    ``picker=NAME``, ``capacity=off``
    (capacities never learned: nothing held), ``capacity.FIELD=VALUE`` (``CapacityConfig``),
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
        elif key == "capacity":
            continue  # read by scrape_of
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


def run_cell(cell: Cell, setups: list[str], measure_s: float = MEASURE_S) -> dict[str, object]:
    """Every slice of ``cell`` through every setup and ``leastconn``."""
    trace = load_named(cell.trace, CONTEXT[cell.trace])
    capacity = fleet_capacity(cell)
    servers = cell.servers()
    speeds = {s.name: s.speed for s in servers}
    slices = []
    for seed in range(1, SLICES + 1):
        offset = random.Random(seed).randrange(len(trace))
        piece = arrivals_at_load(trace, offset, cell.load, capacity, until=WARMUP_S + measure_s,
                                 span=WARMUP_S + measure_s + TAIL_S, config=servers[0].engine)
        row: dict[str, object] = {"seed": seed, "offset": offset, "rate": piece.rate,
                                  "work": piece.demand}
        for setup in ["leastconn", *setups]:
            results = des.run("ours" if setup.startswith("ours") else setup, servers,
                              piece.arrivals, cell.max_tokens, WARMUP_S + measure_s,
                              config_of(setup) if setup.startswith("ours") else None,
                              scrape=scrape_of(setup))
            row[setup] = stats(results, speeds, measure_s)
        slices.append(row)
    return {"cell": cell.to_json(), "label": cell.label, "capacity": capacity,
            "slices": slices}


def ratios(cell: dict, setup: str, peer: str = "leastconn") -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"ttft": [], "e2e": [], "throughput": []}
    for s in cell["slices"]:
        ours, ref = s[setup], s[peer]
        out["ttft"].append(ours["ttft_p99"] / ref["ttft_p99"])
        out["e2e"].append(ours["e2e_p99"] / ref["e2e_p99"])
        out["throughput"].append(ours["completed_per_s"] / max(1e-9, ref["completed_per_s"]))
    return out


def verdict(cell: dict, setup: str) -> tuple[dict[str, float], list[str]]:
    """Medians of the per-slice ratios, and which floor conditions fail."""
    r = ratios(cell, setup)
    med = {k: statistics.median(v) for k, v in r.items()}
    failed = []
    if med["ttft"] > FLOOR["ttft"]:
        failed.append("ttft")
    if med["e2e"] > FLOOR["e2e"]:
        failed.append("e2e")
    if med["throughput"] < FLOOR["throughput"]:
        failed.append("req/s")
    if any(s[setup]["shed"] or s[setup]["errors"] for s in cell["slices"]):
        failed.append("errors")
    return med, failed


def goal_met(cell: dict, med: dict[str, float]) -> bool | None:
    """The gain goal of a mixed-speed cell (p99 TTFT and E2E ratios at once): 90% load,
    hidden lengths 0.9x / 0.8x, declared 0.8x / 0.7x; 70% load 0.8x / 0.8x. None elsewhere."""
    c = cell["cell"]
    if c["speeds"] != "mixed":
        return None
    if c["load"] >= 0.9:
        ttft, e2e = (0.9, 0.8) if c["lengths"] == "hidden" else (0.8, 0.7)
    else:
        ttft, e2e = 0.8, 0.8
    return med["ttft"] <= ttft and med["e2e"] <= e2e


def line(cell: dict, setup: str) -> str:
    med, failed = verdict(cell, setup)
    r = ratios(cell, setup)
    per = " ".join(f"{t:.2f}/{e:.2f}" for t, e in zip(r["ttft"], r["e2e"], strict=True))
    flag = "FLOOR " + ",".join(failed) if failed else "ok"
    return (f"{cell['label']:<88} {setup:<28} TTFT {med['ttft']:.2f}x E2E {med['e2e']:.2f}x "
            f"req/s {med['throughput']:.3f}x  [{per}]  {flag}")


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
    """Per setup: cells passing the floor, the worst and median cell ratios."""
    out = []
    for setup in setups:
        verdicts = [(verdict(c, setup), c) for c in cells]
        passed = sum(not failed for (_, failed), _ in verdicts)
        worst_ttft = max(verdicts, key=lambda v: v[0][0]["ttft"])
        worst_e2e = max(verdicts, key=lambda v: v[0][0]["e2e"])
        med_ttft = statistics.median(v[0][0]["ttft"] for v in verdicts)
        med_e2e = statistics.median(v[0][0]["e2e"] for v in verdicts)
        judged = [(goal_met(c, med), c) for (med, _), c in verdicts]
        goals = [(met, c) for met, c in judged if met is not None]
        out.append(f"{setup}: floor held in {passed}/{len(cells)} cells; median cell TTFT "
                   f"{med_ttft:.2f}x E2E {med_e2e:.2f}x\n  worst TTFT "
                   f"{worst_ttft[0][0]['ttft']:.2f}x ({worst_ttft[1]['label']})\n  worst E2E "
                   f"{worst_e2e[0][0]['e2e']:.2f}x ({worst_e2e[1]['label']})\n  mixed-speed "
                   f"gain goals met in {sum(met for met, _ in goals)}/{len(goals)} cells")
    return "\n".join(out)
