"""From process start to full speed: queries per second answered, second by second, by a
DNS server started under full load of client subnets it has never seen.

Each arm starts its server (pinned to CPU 0) and at the same moment dnsperf (CPU 1, 10
clients, 100 outstanding queries each), which sends ECS queries from distinct /24s drawn
from the routable IPv4 space for ``--seconds``; dnsperf's per-second report (``-S 1``) is
printed relative to the start of the process. The arms:

- ``gdnsd``: compiles its GeoIP map before it answers;
- ``ours, no stored map``: ``--map-cache none``: the server builds its network map (about
  ten seconds) before it answers, as gdnsd does;
- ``ours, no stored map, --answer-before-map``: answering at once, while the map is built
  in the background (never-seen subnets take the slow path meanwhile);
- ``ours, stored map``: the map of an earlier start is loaded from ``--map-cache``;
- ``ours signed, stored map``: the same, signing (DO set in every query).

Per arm and repeat: the first second with answers, the first second at >= 80% of the last
four seconds' median ("full speed"), the answers of the first ten seconds, and that median.

    python bench/dns_ramp.py [--seconds 20] [--repeats 3] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dns_bench import GDNSD_PORT, OURS_PORT, PYTHON, ROOT, make_keys, stop, with_do

QUERIES = 2_500_000


def ours_command(port: int, maps: str, keys: Path | None = None,
                 *extra: str) -> list[str]:
    cmd = ["taskset", "-c", "0", PYTHON, "-m", "director", "dns", "serve",
           "--policy", str(ROOT / "policies/examples/global.dp"),
           "--listen", f"127.0.0.1:{port}", "--map-cache", maps, *extra]
    return cmd + (["--dnssec-keys", str(keys)] if keys is not None else [])


def gdnsd_command(workdir: Path) -> list[str]:
    conf = workdir / "gdnsd"
    subprocess.run([PYTHON, ROOT / "bench/dns_gdnsd_conf.py", conf, "--port",
                    str(GDNSD_PORT)], check=True, capture_output=True)
    return ["taskset", "-c", "0", "gdnsd", "-c", str(conf), "start"]


def launch(cmd: list[str], log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=out,
                                env=dict(os.environ, PYTHONPATH=str(ROOT)))


def store_map(workdir: Path, maps: Path) -> None:
    """Start ours once and wait until it has stored its map in ``maps``."""
    log = workdir / "prepare.log"
    proc = launch(ours_command(OURS_PORT, str(maps)), log)
    try:
        deadline = time.monotonic() + 120
        while not list(maps.glob("*.pickle")):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no map stored; see {log}")
            time.sleep(0.5)
    finally:
        stop(proc)


def ramp(start: Callable[[], subprocess.Popen], port: int, queries: Path,
         seconds: float) -> list[tuple[float, float]]:
    """(seconds since the server's start, qps) for each second of the run."""
    t0 = time.time()
    proc = start()
    perf = subprocess.run(
        ["taskset", "-c", "1", "dnsperf", "-s", "127.0.0.1", "-p", str(port), "-c", "10",
         "-q", "100", "-t", "1", "-l", str(seconds), "-S", "1", "-B", "-d", str(queries)],
        capture_output=True, text=True, timeout=seconds + 60).stdout
    stop(proc)
    return [(float(ts) - t0, float(qps))
            for ts, qps in re.findall(r"^(\d+\.\d+): ([\d.]+)$", perf, re.M)]


def summary(points: list[tuple[float, float]]) -> tuple[float, float, float, float]:
    """(first second with answers, first second at full speed, answers in the first ten
    seconds, steady qps)."""
    steady = statistics.median(q for _, q in points[-4:])  # every arm is there by then
    first = next((t for t, q in points if q > 0), float("nan"))
    full = next((t for t, q in points if q > 0 and q >= 0.8 * steady), float("nan"))
    early = sum(q for t, q in points if t <= 10.5)
    return first, full, early, steady


def fresh_queries(workdir: Path) -> Path:
    """``QUERIES`` ECS queries from distinct /24s in ``workdir`` (made once, then reused)."""
    workdir.mkdir(parents=True, exist_ok=True)
    fresh = workdir / f"fresh-{QUERIES}.bin"
    if not Path(f"{fresh}.0").exists():
        subprocess.run([PYTHON, ROOT / "bench/dns_gen_queries.py", fresh, "--fresh",
                        str(QUERIES), "--parts", "1"], check=True)
    return Path(f"{fresh}.0")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="dns-ramp-"))
    queries = fresh_queries(workdir)
    maps = workdir / "maps"
    store_map(workdir, maps)
    keys = make_keys(workdir)
    gdnsd = gdnsd_command(workdir)
    arms = {
        "gdnsd": (lambda: launch(gdnsd, workdir / "gdnsd.log"), GDNSD_PORT, queries),
        "ours, no stored map": (lambda: launch(ours_command(OURS_PORT, "none"),
                                               workdir / "ours.log"), OURS_PORT, queries),
        "ours, no stored map, --answer-before-map": (
            lambda: launch(ours_command(OURS_PORT, "none", None, "--answer-before-map"),
                           workdir / "ours.log"), OURS_PORT, queries),
        "ours, stored map": (lambda: launch(ours_command(OURS_PORT, str(maps)),
                                            workdir / "ours.log"), OURS_PORT, queries),
        "ours signed, stored map": (lambda: launch(ours_command(OURS_PORT, str(maps), keys),
                                                   workdir / "ours.log"), OURS_PORT,
                                    with_do(queries)),
    }
    results: dict[str, list[tuple[float, float, float, float]]] = {}
    for repeat in range(args.repeats):
        for name, (start, port, asked) in arms.items():
            points = ramp(start, port, asked, args.seconds)
            results.setdefault(name, []).append(summary(points))
            shown = " ".join(f"{t:.0f}s:{q / 1000:.0f}k" for t, q in points)
            print(f"{name} (round {repeat + 1}): {shown}", flush=True)
    print()
    print("| server | first answer s | full speed (>= 80% of steady) from s | answers in "
          "the first 10 s | steady qps |")
    print("|---|---|---|---|---|")
    for name, runs in results.items():
        cells = []
        for i in range(4):
            values = [run[i] for run in runs]
            middle, low, high = statistics.median(values), min(values), max(values)
            cells.append(f"{middle:,.1f} [{low:,.1f}, {high:,.1f}]" if i < 2 else
                         f"{middle:,.0f} [{low:,.0f}, {high:,.0f}]")
        print(f"| {name} | {' | '.join(cells)} |")
    print("\nEach cell: median [min, max] over the rounds; seconds from the server's start.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
