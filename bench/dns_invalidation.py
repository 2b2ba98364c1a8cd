"""What a state change costs the DNS caches: answers invalidated, answers really changed,
engine decisions and CPU to answer the mix again. In-process, one DnsApp over the example
policy with the GeoIP network map, the 30,000-subnet ECS mix plus the same queries without
ECS from 50 resolvers.

Changes, applied through a ``StaticSnapshotSource`` one after the other: every region's
load moving under the spillover threshold (x20, what probes report every second), us-east
crossing the threshold, its load moving above it, going back under, eu-west down and up,
eu-west draining and back, and new RTT samples for a few networks (chat steers by latency).

    python bench/dns_invalidation.py
"""

from __future__ import annotations

import random
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from director.dns.app import DnsApp
from director.dns.ratelimit import RrlMode
from director.dns.snapshot_source import StaticSnapshotSource
from director.engine import RegionState
from director.engine.location_class import location_classifier
from director.geo import GeoLocator
from director.geo_merge import MergedNetworks
from policies import load_policy

ROOT = Path(__file__).resolve().parents[1]
REGIONS = ("us-east", "eu-west", "eu-central", "ap-south")


def mix_queries() -> list[bytes]:
    path = Path(tempfile.mkdtemp(prefix="dns-invalidation-")) / "mix.bin"
    subprocess.run([sys.executable, ROOT / "bench/dns_gen_queries.py", path], check=True,
                   stdout=subprocess.DEVNULL)
    data, out, at = path.read_bytes(), [], 0
    while at < len(data):
        (size,) = struct.unpack_from("!H", data, at)
        out.append(data[at + 2:at + 2 + size])
        at += 2 + size
    return out


def main() -> int:
    policy = load_policy(str(ROOT / "policies/examples/global.dp"))
    geo = GeoLocator()
    snapshots = StaticSnapshotSource()
    app = DnsApp(policy, geo, snapshots, rrl_mode=RrlMode.OFF)
    app.locator.network_map = MergedNetworks(geo, location_classifier(policy)).compile_ipv4()
    queries = mix_queries()
    plain = [q for q in queries[:200]]  # the same names without ECS come from resolvers
    hosts = [f"198.51.100.{n}" for n in range(50)]
    rng = random.Random(1)
    calm = {name: RegionState(healthy=True, utilization=0.5) for name in REGIONS}
    state = dict(calm)
    latency: dict[str, dict[str, float]] = {}

    def answer_all() -> tuple[list[bytes | None], float, int]:
        decisions_before = sum(app.stats.decision_counts)
        start = time.process_time()
        out = [app.respond(q, "127.0.0.1") for q in queries]
        out += [app.respond(q, host) for q in plain for host in hosts[:5]]
        return out, time.process_time() - start, sum(app.stats.decision_counts) - decisions_before

    snapshots.update(state, latency)
    answers, _, _ = answer_all()
    answer_all()
    changes: list[tuple[str, dict, dict | None]] = []
    for n in range(20):
        changes.append((f"loads under the threshold ({n + 1})", {
            name: RegionState(healthy=True, utilization=rng.uniform(0.3, 0.8)) for name in REGIONS},
            None))
    over = RegionState(healthy=True, utilization=0.9)
    changes += [
        ("us-east crosses the spillover threshold", {"us-east": over}, None),
        ("us-east load moves above it", {"us-east": RegionState(healthy=True,
                                                                utilization=0.95)}, None),
        ("us-east back under", {"us-east": RegionState(healthy=True, utilization=0.5)}, None),
        ("eu-west down", {"eu-west": RegionState(healthy=False, utilization=0.5)}, None),
        ("eu-west up", {"eu-west": RegionState(healthy=True, utilization=0.5)}, None),
        ("eu-west draining", {"eu-west": RegionState(healthy=True, utilization=0.5,
                                                     draining=True)}, None),
        ("eu-west back", {"eu-west": RegionState(healthy=True, utilization=0.5)}, None),
        ("RTT samples for 3 networks", {}, {
            "81.2.69.0/24": {"eu-west": 12.0, "eu-central": 20.0, "us-east": 80.0,
                             "ap-south": 150.0},
            "2.2.2.0/24": {"eu-west": 30.0, "eu-central": 9.0, "us-east": 90.0,
                           "ap-south": 140.0},
            "8.8.8.0/24": {"eu-west": 80.0, "eu-central": 90.0, "us-east": 8.0,
                           "ap-south": 200.0}}),
    ]
    print(f"{len(queries):,} ECS queries + {len(plain) * 5:,} without ECS, "
          f"{app.fast.cache.entries:,} cache entries when warm\n")
    print("| change | cache entries (memo + lanes) | dropped | answers that changed | "
          "engine decisions | CPU ms to answer the mix again |")
    print("|---|---|---|---|---|---|")
    quiet_rows = []
    for label, regions, rtts in changes:
        state.update(regions)
        if rtts is not None:
            latency = rtts
        cached = app.fast.cache.entries - len(app.fast.cache.templates) + (
            len(app.fast._lanes) if app.fast._lanes is not None else 0)
        before = app.stats.invalidated
        snapshots.update(state, latency)
        new, cpu, decided = answer_all()
        changed = sum(1 for a, b in zip(answers, new, strict=True) if a != b)
        answers = new
        row = (f"| {label} | {cached:,} | {app.stats.invalidated - before:,} | {changed:,} | "
               f"{decided:,} | {cpu * 1000:.0f} |")
        if label.startswith("loads under"):
            quiet_rows.append((app.stats.invalidated - before, changed, decided, cpu))
            if len(quiet_rows) < 20:
                continue
            row = (f"| loads under the threshold (20 changes, total) | {cached:,} | "
                   f"{sum(r[0] for r in quiet_rows):,} | {sum(r[1] for r in quiet_rows):,} | "
                   f"{sum(r[2] for r in quiet_rows):,} | "
                   f"{sum(r[3] for r in quiet_rows) / 20 * 1000:.0f} (each) |")
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
