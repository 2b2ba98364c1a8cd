"""How long this machine leaves a running or sleeping process without a CPU: gaps a busy loop
sees in its own clock, and how late ``time.sleep`` wakes. On a host that deschedules the
guest's vCPUs, a test that assumes "nothing takes more than a few hundred milliseconds"
(a Redis bound, a lease, a learning deadline) fails at random; these figures say how long
the assumption must allow.

    python bench/machine_stalls.py [--seconds 5] [--gap-ms 5] [--sleeps 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

SLEEPS_S = (0.001, 0.01, 0.05, 0.1, 0.2, 0.5)


def busy_gaps(seconds: float, gap_s: float) -> list[float]:
    """Gaps longer than ``gap_s`` between two consecutive clock reads of a busy loop."""
    gaps = []
    started = last = time.perf_counter()
    while last - started < seconds:
        now = time.perf_counter()
        if now - last > gap_s:
            gaps.append(now - last)
        last = now
    return gaps


def sleep_overshoots(rounds: int) -> list[float]:
    """How much later than asked ``time.sleep`` returned, over ``rounds`` of each length."""
    late = []
    for _ in range(rounds):
        for asked in SLEEPS_S:
            started = time.perf_counter()
            time.sleep(asked)
            late.append(time.perf_counter() - started - asked)
    return late


def _ms(values: list[float]) -> str:
    return ", ".join(f"{v * 1000:.0f}" for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="busy loop's length")
    parser.add_argument("--gap-ms", type=float, default=5.0, help="shortest gap counted")
    parser.add_argument("--sleeps", type=int, default=20, help="rounds of each sleep length")
    args = parser.parse_args()
    gaps = sorted(busy_gaps(args.seconds, args.gap_ms / 1000))
    print(f"busy loop, {args.seconds:g} s: {len(gaps)} gaps over {args.gap_ms:g} ms, "
          f"{sum(gaps):.2f} s in all; longest (ms): {_ms(gaps[-8:])}")
    late = sorted(sleep_overshoots(args.sleeps))
    quantiles = statistics.quantiles(late, n=100)
    print(f"time.sleep of {', '.join(f'{s:g}' for s in SLEEPS_S)} s, {len(late)} in all: "
          f"late by median {quantiles[49] * 1000:.1f} ms, p90 {quantiles[89] * 1000:.0f} ms, "
          f"p99 {quantiles[98] * 1000:.0f} ms, max {late[-1] * 1000:.0f} ms")


if __name__ == "__main__":
    main()
