# SPDX-License-Identifier: Apache-2.0
"""HA drills, repeated: the goals of the HA issue measured in the lab (root; network
namespaces, redis-server, Unbound).

One lab (``director.lab``: three state hosts, two DNS servers, two APIs, two hosts of one
region), then each ``--faults`` fault ``--repeat`` times (``director.lab.drill``), each
lasting ``--fault-s`` and watched ``--settle-s`` after it is undone. Every report is
appended to ``--out`` (JSON lines). Printed per fault:

- runs meeting every goal;
- time for each tier to write to the new master (faults that move it): median and range
  over the runs, and the worst against the bound (Sentinel's down-after + 10 s);
- DNS: queries, failures and changed answers summed over the runs, per server and through
  the resolver, with the worst p99 latency;
- critical writes: durable, not durable, failed, and durable writes lost (the goal: none);
- inference: requests, failures, failures in flight on a killed balancer.

    python bench/ha_drills.py --faults master-kill --repeat 20 --out /tmp/ha.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from director.lab.drill import FOLLOW_SLACK_S, run_drill
from director.lab.faults import FAULTS
from director.lab.run import Lab
from director.lab.shape import LabShape
from director.up.redis_set import SentinelTimings


def summarize(fault: str, reports: list[dict[str, Any]]) -> list[str]:
    lines = [f"## {fault} ({FAULTS[fault].summary}): {len(reports)} runs"]
    met = sum(all(r["goals"].values()) for r in reports)
    lines.append(f"- every goal met: {met}/{len(reports)}")
    missed: dict[str, int] = {}
    for r in reports:
        for goal, ok in r["goals"].items():
            if not ok:
                missed[goal] = missed.get(goal, 0) + 1
    if missed:
        lines.append("- missed: " + ", ".join(f"{g} x{n}" for g, n in missed.items()))
    bound = reports[0]["down_after_s"] + FOLLOW_SLACK_S
    for tier in ("api", "balancers", "workers"):
        values = [r["follow_s"].get(tier) for r in reports]
        seen = sorted(v for v in values if v is not None)
        if not seen:
            continue
        lines.append(f"- {tier} write to the master after the fault: median "
                     f"{statistics.median(seen):.2f} s, range {seen[0]:.2f}-{seen[-1]:.2f} s"
                     f" (bound {bound:g} s), never: {len(values) - len(seen)}")
    servers = len(reports[0]["dns"])
    for i in range(servers):
        queries = sum(r["dns"][i]["queries"] for r in reports)
        failed = sum(r["dns"][i]["failed"] for r in reports)
        changed = sum(r["dns"][i]["changed"] for r in reports)
        p99 = max(r["dns"][i]["p99_ms"] or 0 for r in reports)
        worst = max(r["dns"][i]["max_ms"] or 0 for r in reports)
        name = "resolver" if i == servers - 1 else f"dns-{i + 1}"
        left_out = sum(r["dns"][i].get("left_out_dead", 0) for r in reports)
        after = [r["dns"][i]["left_out_after_s"] for r in reports
                 if r["dns"][i].get("left_out_after_s") is not None]
        dropped = (f", {left_out} left the dead balancer out (first after "
                   f"{min(after):.1f}-{max(after):.1f} s)" if after else "")
        lines.append(f"- DNS {name}: {queries} queries, {failed} failed "
                     f"({100 * failed / max(queries, 1):.2f}%), {changed} changed answers"
                     f"{dropped}, worst run p99 {p99:.1f} ms, slowest {worst:.0f} ms")
    ledger = {k: sum(r["ledger"][k] for r in reports)
              for k in ("writes", "durable", "not_durable", "failed", "lost_not_durable")}
    lost = sum(len(r["ledger"]["lost_durable"]) for r in reports)
    lines.append(f"- critical writes: {ledger['writes']}: {ledger['durable']} durable, "
                 f"{ledger['not_durable']} reported not durable "
                 f"({ledger['lost_not_durable']} of them lost), {ledger['failed']} failed "
                 f"(an error answer); durable writes lost: {lost}")
    infer = {k: sum(r["inference"][k] for r in reports)
             for k in ("requests", "failed", "failed_in_flight_on_killed")}
    lines.append(f"- inference: {infer['requests']} requests, {infer['failed']} failed "
                 f"({infer['failed_in_flight_on_killed']} in flight on the killed balancer)")
    return lines


async def main(args: argparse.Namespace) -> None:
    lab = Lab(LabShape(sentinels_apart=not args.sentinels_beside_servers),
              Path(args.run_dir), n=args.number,
              timings=SentinelTimings(down_after_ms=args.down_after_ms,
                                      max_lag_s=args.max_lag_s))
    by_fault: dict[str, list[dict[str, Any]]] = {}
    await lab.start()
    print(f"lab up in {lab.started_s:.1f} s", flush=True)
    try:
        for fault in args.faults.split(","):
            for run in range(1, args.repeat + 1):
                report = await run_drill(lab, fault, fault_s=args.fault_s,
                                         settle_s=args.settle_s)
                report["run"] = run
                by_fault.setdefault(fault, []).append(report)
                if args.out:
                    with open(args.out, "a") as file:
                        file.write(json.dumps(report) + "\n")
                print(f"{fault} #{run}: goals {report['goals']}", flush=True)
    finally:
        await lab.stop()
    for fault, reports in by_fault.items():
        print("\n".join(summarize(fault, reports)), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--fault-s", type=float, default=15.0)
    parser.add_argument("--settle-s", type=float, default=15.0)
    parser.add_argument("--out", default="")
    parser.add_argument("--run-dir", default="/tmp/director-ha-bench")
    parser.add_argument("--number", type=int, default=78)
    parser.add_argument("--down-after-ms", type=int, default=SentinelTimings.down_after_ms,
                        help="Sentinel's down-after-milliseconds")
    parser.add_argument("--max-lag-s", type=int, default=SentinelTimings.max_lag_s,
                        help="the servers' min-replicas-max-lag")
    parser.add_argument("--sentinels-beside-servers", action="store_true",
                        help="a Sentinel on each state host (the Redis documentation's "
                             "layout) instead of on hosts of their own")
    asyncio.run(main(parser.parse_args()))
