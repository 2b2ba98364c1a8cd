"""Other clients' latency while one source floods random client subnets; gdnsd beside us.

The flood: an open-loop sender (this script in ``--flood`` mode) from 127.0.0.1 at
``--flood-rate`` (50,000) queries per second, each with an ECS /24 never seen before
(``bench/dns_gen_queries.py --fresh``). The others: 200
resolvers in 200 /24s (127.0.10.1 .. 127.0.209.1) asking ``--probe-rate`` (2,000) queries
per second between them, ECS from the 30,000-subnet mix, each reply's latency measured
by the sender (one selector loop). Each cell runs ``--seconds``; the table gives the
others' p50, p99 and max latency, their losses, and what the server answered of the flood.

Cells: gdnsd (no rate limiting) and ours with ``--rrl enforce`` under the flood, ours with
the default ``log-only`` under the flood (it answers every flood query), and each server
without a flood. Servers pinned to CPU 0, the flood to CPU 1, the probe unpinned.

    python bench/dns_flood.py [--seconds 10] [--flood-rate 50000] [--probe-rate 2000]
"""

from __future__ import annotations

import argparse
import random
import selectors
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dns_bench import (
    GDNSD_PORT,
    OURS_PORT,
    PYTHON,
    ROOT,
    start_gdnsd,
    stop,
    wait_for_maps,
    wait_udp,
)

PROBES = 200


def probe_queries(workdir: Path) -> list[bytes]:
    """Queries (ID zeroed) from the 30k mix's subnets."""
    mix = workdir / "ecs-mix.bin"
    subprocess.run([PYTHON, ROOT / "bench/dns_gen_queries.py", mix], check=True,
                   stdout=subprocess.DEVNULL)
    data, out = mix.read_bytes(), []
    at = 0
    while at < len(data):
        (size,) = struct.unpack_from("!H", data, at)
        out.append(data[at + 2:at + 2 + size])
        at += 2 + size
    return out


def run_probe(port: int, queries: list[bytes], rate: float, seconds: float) -> dict:
    """Send ``rate`` queries per second round-robin from PROBES sockets for ``seconds``;
    latencies of the replies (ms) and the count lost (no reply within a second)."""
    selector = selectors.DefaultSelector()
    sockets = []
    for n in range(PROBES):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind((f"127.0.{10 + n}.1", 0))
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, n)
        sockets.append(sock)
    rng = random.Random(5)
    sent: dict[tuple[int, int], float] = {}
    latencies: list[float] = []
    start = time.monotonic()
    total = int(rate * seconds)
    n = 0
    while True:
        now = time.monotonic()
        while n < total and start + n / rate <= now:
            index = n % PROBES
            qid = (n // PROBES) & 0xFFFF
            query = qid.to_bytes(2, "big") + rng.choice(queries)[2:]
            try:
                sockets[index].sendto(query, ("127.0.0.1", port))
                sent[(index, qid)] = time.monotonic()
            except OSError:
                pass
            n += 1
        if n >= total and (not sent or now - start > seconds + 1.0):
            break
        wait = max(0.0, min(0.001, start + n / rate - time.monotonic()))
        for key, _ in selector.select(wait):
            sock = key.fileobj
            index = key.data
            while True:
                try:
                    reply = sock.recv(4096)
                except BlockingIOError:
                    break
                sent_at = sent.pop((index, int.from_bytes(reply[:2], "big")), None)
                if sent_at is not None:
                    latencies.append((time.monotonic() - sent_at) * 1000)
    for sock in sockets:
        sock.close()
    latencies.sort()
    lost = len(sent)
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]  # noqa: E731
    return {"answered": len(latencies), "lost": lost, "p50": pick(0.5), "p99": pick(0.99),
            "max": latencies[-1], "mean": statistics.fmean(latencies)}


def start_flood(port: int, fresh: Path, rate: int, seconds: float) -> subprocess.Popen:
    """This script in ``--flood`` mode on CPU 1: an open loop (dnsperf is a closed one, and
    it spends its CPU tracking the queries a limiter drops)."""
    return subprocess.Popen(
        ["taskset", "-c", "1", PYTHON, __file__, "--flood", str(fresh), "--port", str(port),
         "--flood-rate", str(rate), "--seconds", str(seconds + 1)],
        stdout=subprocess.PIPE, text=True)


def flood(port: int, fresh: Path, rate: int, seconds: float) -> None:
    """Send the queries of ``fresh`` (dnsperf's binary format) from 127.0.0.1 at ``rate``
    per second for ``seconds``, ignoring replies; print how many were sent and answered."""
    data, packets, at = fresh.read_bytes(), [], 0
    while at < len(data) and len(packets) < rate * seconds:
        (size,) = struct.unpack_from("!H", data, at)
        packets.append(data[at + 2:at + 2 + size])
        at += 2 + size
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 24)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    target, sendto, recv = ("127.0.0.1", port), sock.sendto, sock.recv
    answered = sent = 0
    start = time.monotonic()
    for sent, packet in enumerate(packets, 1):
        if sent % 100 == 0:
            while True:  # drain what came back, so the count is right
                try:
                    recv(4096)
                    answered += 1
                except BlockingIOError:
                    break
            ahead = start + sent / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        try:  # noqa: SIM105 (the sending loop: cheaper than contextlib.suppress)
            sendto(packet, target)
        except OSError:
            pass
    elapsed = time.monotonic() - start
    time.sleep(0.5)
    while True:
        try:
            recv(4096)
            answered += 1
        except BlockingIOError:
            break
    print(f"answered {answered} of {sent} sent at {sent / elapsed:.0f}/s")


def flood_answered(flood: subprocess.Popen) -> str:
    out = flood.communicate(timeout=60)[0].split()
    return f"{int(out[1]):,} of {int(out[3]):,} ({float(out[6].rstrip('/s')):,.0f}/s)"


def start_ours(rrl: str) -> subprocess.Popen:
    handle, log = tempfile.mkstemp(prefix="dns-flood-ours-", suffix=".log")
    proc = subprocess.Popen(
        ["taskset", "-c", "0", PYTHON, "-m", "director", "dns", "serve", "--policy",
         str(ROOT / "policies/examples/global.dp"), "--listen", f"127.0.0.1:{OURS_PORT}",
         "--rrl", rrl], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=handle)
    wait_udp(OURS_PORT)
    wait_for_maps(Path(log), 1)
    return proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--flood-rate", type=int, default=50_000)
    parser.add_argument("--probe-rate", type=float, default=2000.0)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--flood", type=Path, help=argparse.SUPPRESS)  # the flood process
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.flood:
        flood(args.port, args.flood, args.flood_rate, args.seconds)
        return 0
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="dns-flood-"))
    fresh = workdir / "fresh.bin"
    count = int(args.flood_rate * (args.seconds + 2))
    subprocess.run([PYTHON, ROOT / "bench/dns_gen_queries.py", fresh, "--fresh", str(count)],
                   check=True, stdout=subprocess.DEVNULL)
    fresh = Path(f"{fresh}.0")
    queries = probe_queries(workdir)
    rows = []
    cells = [("gdnsd", None, False), ("gdnsd", None, True), ("ours", "enforce", False),
             ("ours", "enforce", True), ("ours", "log-only", True)]
    for server, rrl, flooding in cells:
        proc = start_gdnsd(workdir, True) if server == "gdnsd" else start_ours(rrl)
        port = GDNSD_PORT if server == "gdnsd" else OURS_PORT
        try:
            flooder = (start_flood(port, fresh, args.flood_rate, args.seconds) if flooding
                       else None)
            time.sleep(0.5)
            probe = run_probe(port, queries, args.probe_rate, args.seconds)
            answered = flood_answered(flooder) if flooder is not None else "-"
        finally:
            stop(proc)
            time.sleep(0.5)
        label = server if rrl is None else f"{server} --rrl {rrl}"
        rows.append((label, f"{args.flood_rate:,}/s" if flooding else "none", probe, answered))
        print(f"  {rows[-1][0]}, flood {rows[-1][1]}: p99 {probe['p99']:.2f} ms, "
              f"lost {probe['lost']}", flush=True)
    print(f"\nOther clients: {args.probe_rate:,.0f} qps from {PROBES} /24s for "
          f"{args.seconds:.0f} s; flood from 127.0.0.1 with new /24s.\n")
    print("| server | flood | others p50 ms | p99 ms | max ms | others lost | "
          "flood queries answered |")
    print("|---|---|---|---|---|---|---|")
    for label, flood_label, probe, answered in rows:
        print(f"| {label} | {flood_label} | {probe['p50']:.2f} | {probe['p99']:.2f} | "
              f"{probe['max']:.1f} | {probe['lost']} of {probe['answered'] + probe['lost']} | "
              f"{answered} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
