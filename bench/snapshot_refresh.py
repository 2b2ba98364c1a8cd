"""Benchmark: delay from a health change written to Redis to the refresher's snapshot.

A real Valkey, a policy of 4 regions x 50 GPU servers, a :class:`SnapshotRefresher` with its
default safety-net period. A writer flips one region balancer's health (rise = fall = 1, so
every write is a change) through the Lua hysteresis; the delay is measured from just before
the write until ``refresher.current`` shows the new health. Run::

    .venv/bin/python bench/snapshot_refresh.py [--changes 300]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from director.refresh.refresher import SnapshotRefresher
from policies.model import (
    Affinity,
    AllDown,
    AllDownKind,
    Capacity,
    Failover,
    GpuServer,
    NoEcs,
    Policy,
    Region,
    Service,
    Soa,
    UnknownKind,
    UnknownLocation,
    Zone,
)
from state import AsyncStateStore, EmbeddedValkey, StateStore


def fleet(regions: int, gpus: int) -> Policy:
    built = tuple(
        Region(
            f"r{r}", 0.0, 0.0, "US", (f"127.0.{r}.1",), (), Capacity(100.0), 1.0,
            tuple(GpuServer(f"g{n}", f"http://127.0.{r}.{n}:8000", ("m",), None, None, "vllm")
                  for n in range(gpus)),
            None,
        )
        for r in range(regions)
    )  # fmt: skip
    service = Service(
        "chat.example.com", (), ("geo",), (), 30.0, 5.0, 1, None, Failover(1, 1, 1.0, 0.5), (),
        AllDown(AllDownKind.ANSWER_NOTHING), UnknownLocation(UnknownKind.ANY), NoEcs.RESOLVER,
        Affinity.NONE, None,
    )  # fmt: skip
    zone = Zone("example.com", 30.0, Soa("ns1", "host", 1, 1, 1, 1, 1), (), ())
    return Policy(zone, (), (), built, (service,), 30.0)


async def run(url: str, changes: int) -> list[float]:
    policy = fleet(4, 50)
    writer = StateStore.from_url(url, prefix="bench")
    for region in policy.regions:  # populate every record the snapshot reads
        writer.record_probe(region.name, None, ok=True, rise=1, fall=1)
        for gpu in region.gpus:
            writer.record_probe(region.name, gpu.name, ok=True, rise=1, fall=1)
    delays: list[float] = []
    async with SnapshotRefresher(AsyncStateStore.from_url(url, prefix="bench"), policy) as ref:
        for i in range(changes):
            region, up = f"r{i % 4}", i % 8 >= 4
            started = time.perf_counter()
            await asyncio.to_thread(writer.record_probe, region, None, ok=up, rise=1, fall=1)
            await ref.wait_for(lambda s, r=region, u=up: s.region(r).healthy is u, timeout=5)
            delays.append((time.perf_counter() - started) * 1000)
        await ref.store.close()
    writer.close()
    return delays


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=300)
    args = parser.parse_args()
    with EmbeddedValkey() as valkey:
        delays = sorted(asyncio.run(run(valkey.url, args.changes)))
    p99 = delays[min(len(delays) - 1, int(len(delays) * 0.99))]
    print(f"changes={len(delays)} regions=4 gpus/region=50")
    print(
        f"change -> snapshot: p50 {statistics.median(delays):.2f} ms, p99 {p99:.2f} ms, "
        f"max {delays[-1]:.2f} ms (target p99 < 200 ms)"
    )


if __name__ == "__main__":
    main()
