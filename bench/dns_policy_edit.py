"""A policy edit that changes the location classes, under full load of never-seen client
subnets: queries per second answered, second by second, before and after the edit.

The server starts on a copy of ``policies/examples/global.dp`` with its network map stored
(``--map-cache``), pinned to CPU 0; dnsperf (CPU 1, 10 clients, 100 outstanding each) sends
ECS queries from distinct /24s. At ``--edit-at`` seconds ap-south moves from Mumbai to
Singapore (other location classes: no stored map for them) and the server gets SIGHUP. It
builds the new classes' map while the last policy answers, then swaps; the server's log
says when. Printed per round: qps each second, the seconds the new policy took to answer,
and the lowest second after the edit against the median before it.

    python bench/dns_policy_edit.py [--seconds 40] [--edit-at 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dns_bench import OURS_PORT, PYTHON, ROOT, stop
from dns_ramp import fresh_queries, launch

MUMBAI = "location 19.08 72.88  # Mumbai"
SINGAPORE = "location 1.35 103.82  # Singapore"


def serve_command(policy: Path, maps: Path) -> list[str]:
    return ["taskset", "-c", "0", PYTHON, "-m", "director", "dns", "serve", "--policy",
            str(policy), "--listen", f"127.0.0.1:{OURS_PORT}", "--map-cache", str(maps)]


def wait_for(log: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{text!r} not in {log} after {timeout:g} s")
        time.sleep(0.2)


def one_round(workdir: Path, queries: Path, seconds: float,
              edit_at: float) -> tuple[list[tuple[float, float]], float | None]:
    """(seconds since the edit, qps) each second, and the seconds the new policy took."""
    policy_dir = workdir / "policy"
    shutil.rmtree(policy_dir, ignore_errors=True)
    shutil.copytree(ROOT / "policies/examples", policy_dir)
    policy = policy_dir / "global.dp"
    maps = workdir / "maps"
    log = workdir / "serve.log"
    proc = launch(serve_command(policy, maps), log)
    try:
        wait_for(log, "DNS server listening", 180)  # the first round builds the map
        t0 = time.time()
        perf = subprocess.Popen(
            ["taskset", "-c", "1", "dnsperf", "-s", "127.0.0.1", "-p", str(OURS_PORT), "-c",
             "10", "-q", "100", "-t", "1", "-l", str(seconds), "-S", "1", "-B", "-d",
             str(queries)], stdout=subprocess.PIPE, text=True)
        time.sleep(edit_at)
        edited = time.time()
        regions = policy_dir / "regions" / "ap-south.dp"
        target = regions if MUMBAI in regions.read_text() else policy
        target.write_text(target.read_text().replace(MUMBAI, SINGAPORE))
        proc.send_signal(signal.SIGHUP)
        out, _ = perf.communicate(timeout=seconds + 60)
    finally:
        stop(proc)
    waited = re.search(r"answers after ([\d.]+) s spent on its network map", log.read_text())
    points = [(float(ts) - edited, float(qps))
              for ts, qps in re.findall(r"^(\d+\.\d+): ([\d.]+)$", out, re.M)
              if float(ts) > t0]
    return points, float(waited.group(1)) if waited else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--edit-at", type=float, default=8.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="dns-policy-edit-"))
    queries = fresh_queries(workdir)
    print("| round | new policy answers after s | median qps before the edit | lowest "
          "second after it | its ratio |")
    print("|---|---|---|---|---|")
    for repeat in range(args.repeats):
        points, waited = one_round(workdir, queries, args.seconds, args.edit_at)
        stored = sorted((workdir / "maps").glob("*.pickle"), key=lambda p: p.stat().st_mtime)
        for edited_map in stored[1:]:  # the next round builds the edited policy's map again
            edited_map.unlink()
        before = statistics.median(q for t, q in points if t < 0)
        after = min(q for t, q in points if 0 <= t < args.seconds - args.edit_at - 1)
        print(f"| {repeat + 1} | {waited if waited is not None else 'at once'} | "
              f"{before:,.0f} | {after:,.0f} | {after / before:.2f} |", flush=True)
        print("  " + " ".join(f"{t:+.0f}s:{q / 1000:.0f}k" for t, q in points), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
