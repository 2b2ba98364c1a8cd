"""Our DNS server's resident memory over a stream of distinct client subnets.

One worker with the default settings (network map built first, RRL log-only), pinned to
CPU 0; dnsperf on CPU 1 sends ``--count`` queries once each, every one from an ECS subnet
never seen before (/24s of routable IPv4, or /56s of 2000::/3 with ``--ipv6``). The
server's RSS is sampled every second and printed against the queries answered so far;
the last line is the figure (the issue's bound: 250 MB after 10 million), with the
anonymous part (RssAnon: without the GeoIP database's file pages, which the kernel maps
around every page a lookup reads, and reclaims under memory pressure).

    python bench/dns_memory.py [--count 10000000] [--ipv6] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dns_bench import OURS_PORT, PYTHON, ROOT, rss_mb, server_pids, start_ours, stop


def anon_mb(pids: list[int]) -> float:
    """Anonymous resident memory (RssAnon): the process's own, without the file pages
    mapped from the GeoIP database and the libraries."""
    return rss_mb(pids, "RssAnon")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=10_000_000)
    parser.add_argument("--ipv6", action="store_true")
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="dns-memory-"))
    queries = workdir / f"fresh{'6' if args.ipv6 else ''}-{args.count}.bin"
    if not Path(f"{queries}.0").exists():
        subprocess.run([PYTHON, ROOT / "bench/dns_gen_queries.py", queries, "--fresh",
                        str(args.count), *(["--ipv6"] if args.ipv6 else [])], check=True)
    proc = start_ours(1, True)
    pids = server_pids(proc)
    print(f"  after start and map: RSS {rss_mb(pids):.0f} MB, anonymous "
          f"{anon_mb(pids):.0f} MB", flush=True)
    perf = subprocess.Popen(
        ["taskset", "-c", "1", "dnsperf", "-s", "127.0.0.1", "-p", str(OURS_PORT), "-B",
         "-d", f"{queries}.0", "-n", "1", "-c", "10", "-q", "100", "-t", "2", "-S", "5"],
        stdout=subprocess.PIPE, text=True)
    peak = 0.0
    started = time.monotonic()
    samples = []
    try:
        while perf.poll() is None:
            time.sleep(1.0)
            rss = rss_mb(pids)
            peak = max(peak, rss)
            samples.append((time.monotonic() - started, rss))
        out = perf.stdout.read() if perf.stdout else ""
    finally:
        final, final_anon = rss_mb(pids), anon_mb(pids)
        stop(proc)
    completed = int(re.search(r"Queries completed:\s+(\d+)", out).group(1))
    qps = float(re.search(r"Queries per second:\s+([\d.]+)", out).group(1))
    for at, rss in samples[4::5]:
        print(f"  {at:5.0f} s: RSS {rss:.0f} MB")
    kind = "/56s" if args.ipv6 else "/24s"
    print(f"\n| distinct {kind} answered | qps | RSS at the end MB | of which anonymous | "
          "peak RSS MB |")
    print("|---|---|---|---|---|")
    print(f"| {completed:,} | {qps:,.0f} | {final:.0f} | {final_anon:.0f} | {peak:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
