"""How this machine treats memory left idle for a moment: random one-byte reads of the GeoIP
database (56 MB), once through the mapping the DNS server uses and once from a private copy,
in passes with a pause between them. On a machine that backs guest memory lazily or pages it
out behind the guest's back, later passes cost many times the first; the suite's GeoIP
merges, DNS fixtures and every ``director up`` pay that.

    python bench/machine_memory.py [--passes 5] [--pause 1.0] [--reads 200000]
"""

from __future__ import annotations

import argparse
import mmap
import random
import statistics
import time

from director.geo import default_database_path


def _pass(data: bytes | mmap.mmap, offsets: list[int]) -> float:
    started = time.perf_counter()
    total = 0
    for offset in offsets:
        total += data[offset]
    return (time.perf_counter() - started) / len(offsets) * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between passes")
    parser.add_argument("--reads", type=int, default=200_000)
    args = parser.parse_args()
    path = default_database_path()
    with open(path, "rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        copy = handle.read()
    rng = random.Random(1)
    offsets = [rng.randrange(len(copy)) for _ in range(args.reads)]
    for name, data in (("mapped", mapped), ("private copy", copy)):
        costs = []
        for _ in range(args.passes):
            costs.append(_pass(data, offsets))
            time.sleep(args.pause)
        print(f"{name:13} ns per read, pass by pass: "
              + " ".join(f"{c:,.0f}" for c in costs)
              + f"  (first {costs[0]:,.0f}, median of the rest "
                f"{statistics.median(costs[1:]):,.0f})")
    mapped.close()


if __name__ == "__main__":
    main()
