"""Run dnsperf against gdnsd and the director's DNS server side by side; print a table.

For each server configuration and each query mix it warms the server up (where the mix
says so), runs dnsperf for ``--seconds`` (<= 10 s) and reports queries per second,
dnsperf's average latency, the server's CPU microseconds per answered query from
/proc/<pid>/stat (utime + stime, all threads and worker processes) and its resident memory
after the run, then the ratios ours / gdnsd. The mixes (``--mixes`` picks some):

- ``plain A``: no EDNS; ``ECS one /24``: every query from one subnet;
- ``ECS 30k /24s``: 30,000 distinct /24s located a third each in Europe, the Americas and
  Asia, repeated (after warm-up passes, the steady state of a popular name's cache);
- ``ECS new /24s``: ``--fresh`` (1,500,000) distinct /24s from all of the routable IPv4
  space, none repeated: each round asks its own third, never seen before, without warm-up
  (what an authoritative sees from public resolvers that forward ECS); ``ECS new /56s``:
  the same with IPv6 /56s from 2000::/3 (the ahead-of-time map covers IPv4 only);
- ``random names``: 500,000 names that do not exist under the zone, none repeated (a
  random-subdomain flood; EDNS, no ECS): NXDOMAIN, or signed compact denials;
- ``ECS 30k + state 1/s``: the 30k mix while a writer changes every region's load in a real
  Valkey through the state store once a second (loads under the spillover threshold, as in
  normal operation); ours follows that store (``--redis``), gdnsd has no state.

``--dnssec``: a third server, ours signing online (a CSK made in the work directory),
is measured in every round beside the other two with the same mixes asked with the DO bit
set; the table adds its ratio to our unsigned server, per round, median [min, max].

gdnsd and ``--workers 1`` run pinned with taskset to CPU 0 and dnsperf to CPU 1
("pinned"); gdnsd and ``--workers 2`` also run unpinned ("shared": the server's processes
and dnsperf share the two cores), where a second process can help.

Side by side: both servers of a placement run at once (on their own ports; the idle one
costs nothing), and each of ``--repeats`` rounds measures both back to back, gdnsd first in
even rounds and ours first in odd ones. The table gives each figure's median over the
rounds, and the median of the per-round ratios ours / gdnsd, so that a drift in the shared
machine's speed weighs on both servers alike instead of on whichever ran later.

    python bench/dns_bench.py [--seconds 8] [--repeats 3] [--workdir DIR]   # ~10 min
    python bench/dns_bench.py --placements shared --repeats 7    # --workers 2 only
    python bench/dns_bench.py --mixes "ECS new /24s,ECS 30k + state 1/s" --placements pinned
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import dns.edns
import dns.message
import dns.query

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
CLK_TCK = os.sysconf("SC_CLK_TCK")
GDNSD_PORT, OURS_PORT = 5301, 5310
ECS_FIXED = "8:00011800510245"  # family 1, source /24, scope 0, 81.2.69.0


@dataclass
class Result:
    qps: float
    latency_ms: float
    cpu_us: float
    lost: float
    rss_mb: float = 0.0


def wait_udp(port: int, timeout: float = 20.0) -> None:
    query = dns.message.make_query("infer.example.com", "SOA")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            dns.query.udp(query, "127.0.0.1", port=port, timeout=0.5)
            return
        except (dns.exception.Timeout, OSError):
            time.sleep(0.2)
    raise RuntimeError(f"no DNS server answering on port {port}")


def cpu_ticks(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total


def server_pids(proc: subprocess.Popen) -> list[int]:
    pids = [proc.pid]
    try:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        pids += [int(c) for c in children]
    except FileNotFoundError:
        pass
    return pids


def rss_mb(pids: list[int], field: str = "VmRSS") -> float:
    """The processes' resident memory in MB: all of it (``VmRSS``), or a part of it, such
    as ``RssAnon`` (without file pages)."""
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except FileNotFoundError:
            continue
        total += int(re.search(field + r":\s+(\d+)", status).group(1))
    return total / 1024


def dnsperf(port: int, mix: dict, seconds: float, pin: bool, rate: int | None = None,
            round_: int = 0) -> dict:
    args = mix["args"](round_) if callable(mix["args"]) else mix["args"]
    cmd = (["taskset", "-c", "1"] if pin else []) + [
        "dnsperf", "-s", "127.0.0.1", "-p", str(port), "-c", "10", "-q", "100",
        "-l", str(seconds), "-t", "2", *args]
    if rate:
        cmd += ["-Q", str(rate)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30).stdout
    get = lambda pattern: float(re.search(pattern, out).group(1))  # noqa: E731
    return {"qps": get(r"Queries per second:\s+([\d.]+)"),
            "latency": get(r"Average Latency \(s\):\s+([\d.]+)") * 1000,
            "completed": get(r"Queries completed:\s+(\d+)"),
            "lost": get(r"Queries lost:\s+\d+ \(([\d.]+)%\)")}


def measure(proc: subprocess.Popen, port: int, mix: dict, seconds: float, pin: bool,
            warm: bool = True, round_: int = 0) -> Result:
    rate = mix.get("warmup_rate")
    for attempt in range(mix.get("warmup_passes", 1) if warm and mix["warmup"] else 0):
        run = dnsperf(port, mix, mix["warmup"], pin, rate=rate)
        if mix.get("warmup_passes", 1) > 1:
            print(f"    warm-up pass {attempt + 1}: {run['qps']:,.0f} qps, "
                  f"lost {run['lost']:.1f}%", flush=True)
            # warm = the whole file went through at the set rate without losses (a pass
            # slowed by cold subnets has not reached the end of the file)
            if run["lost"] < 0.5 and (rate is None or run["qps"] >= 0.97 * rate):
                break
    pids = server_pids(proc)
    before = cpu_ticks(pids)
    run = dnsperf(port, mix, seconds, pin, round_=round_)
    used = (cpu_ticks(pids) - before) / CLK_TCK
    return Result(run["qps"], run["latency"], used / max(1.0, run["completed"]) * 1e6,
                  run["lost"], rss_mb(pids))


def write_random_names(path: Path, count: int) -> None:
    """``count`` A queries (EDNS, RD clear) for distinct names under the zone that do not
    exist, in dnsperf's -B format."""
    base = dns.message.make_query("x" * 12 + ".infer.example.com", "A", use_edns=0,
                                  payload=1232)
    base.flags = 0
    wire = base.to_wire()
    label = wire.index(b"x" * 12)
    out = bytearray()
    for n in range(count):
        name = f"{n:012x}".encode()
        message = wire[:label] + name + wire[label + 12:]
        out += len(message).to_bytes(2, "big") + message
    path.write_bytes(bytes(out))


def with_do(path: Path) -> Path:
    """A copy of the dnsperf -B query file ``path`` with the DO bit set in every query."""
    out = path.with_name(path.name + ".do")
    if out.exists():
        return out
    data, patched, i = path.read_bytes(), bytearray(), 0
    while i < len(data):
        length = int.from_bytes(data[i:i + 2], "big")
        message = bytearray(data[i + 2:i + 2 + length])
        end = 12
        while message[end]:
            end += message[end] + 1
        end += 5  # the root label, type and class
        if message[10:12] == b"\x00\x01" and message[end + 1:end + 3] == b"\x00\x29":
            message[end + 7] |= 0x80
        patched += length.to_bytes(2, "big") + message
        i += 2 + length
    out.write_bytes(bytes(patched))
    return out


def signed_mix(mix: dict) -> dict:
    """``mix`` asked with the DO bit: dnsperf's -D for text files, patched -B files."""
    def convert(args: list[str]) -> list[str]:
        if "-B" not in args:
            return [*args, "-D"]
        return [str(with_do(Path(a))) if i > 0 and args[i - 1] == "-d" else a
                for i, a in enumerate(args)]

    original = mix["args"]
    if callable(original):
        return {**mix, "args": lambda r: convert(original(r))}
    return {**mix, "args": convert(original)}


def make_keys(workdir: Path) -> Path:
    keys = workdir / "dnssec-keys"
    if not keys.exists():
        subprocess.run([PYTHON, "-m", "director", "dnssec", "keygen", "--policy",
                        str(ROOT / "policies/examples/global.dp"), "--keys", str(keys)],
                       cwd=ROOT, check=True, capture_output=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return keys


def start_gdnsd(workdir: Path, pin: bool) -> subprocess.Popen:
    conf = workdir / "gdnsd"
    subprocess.run([PYTHON, ROOT / "bench/dns_gdnsd_conf.py", conf, "--port", str(GDNSD_PORT)],
                   check=True)
    cmd = (["taskset", "-c", "0"] if pin else []) + ["gdnsd", "-c", str(conf), "start"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_udp(GDNSD_PORT)
    return proc


def start_ours(workers: int, pin: bool, port: int = OURS_PORT,
               redis_url: str | None = None, keys: Path | None = None) -> subprocess.Popen:
    cmd = (["taskset", "-c", "0"] if pin else []) + [
        PYTHON, "-m", "director", "dns", "serve",
        "--policy", str(ROOT / "policies/examples/global.dp"),
        "--listen", f"127.0.0.1:{port}", "--workers", str(workers)]
    if redis_url:
        cmd += ["--redis", redis_url]
    if keys is not None:
        cmd += ["--dnssec-keys", str(keys)]
    handle, log = tempfile.mkstemp(prefix="dns-bench-ours-", suffix=".log")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=handle,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    os.close(handle)
    wait_udp(port)
    wait_for_maps(Path(log), workers)
    return proc


def wait_for_maps(log: Path, workers: int, timeout: float = 120.0) -> None:
    """Wait until every worker has merged the GeoIP database ahead of time, as gdnsd does
    before it answers (the log says so); the build time is printed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = [line for line in log.read_text().splitlines() if "GeoIP network map:" in line]
        if len(lines) >= workers:
            print(f"  ours: {lines[-1].split('GeoIP network map: ', 1)[1]}", flush=True)
            return
        time.sleep(0.5)
    raise RuntimeError(f"no GeoIP network map after {timeout:.0f} s (see {log})")


class LoadWriter:
    """Writes every region's load through the state store once a second (a thread)."""

    def __init__(self, url: str, regions: list[str]) -> None:
        import threading

        from state import StateStore

        self.store = StateStore.from_url(url)
        self.regions = regions
        self.writes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import random

        from state.records import RegionLoad

        rng = random.Random(1)
        while not self._stop.is_set():
            for region in self.regions:
                utilization = rng.uniform(0.3, 0.8)
                self.store.write_region_load(region, RegionLoad(
                    queue_depth=0.0, in_flight=10.0 * utilization,
                    outstanding_seconds=5.0 * utilization, capacity=100.0,
                    utilization=utilization, timestamp=time.time()))
            self.writes += 1
            self._stop.wait(1.0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.store.close()


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def check_answers(port: int) -> str:
    out = []
    for subnet in ("81.2.69.0/24", "2.2.2.0/24", "8.8.8.0/24", "1.0.16.0/24"):
        query = dns.message.make_query("chat.infer.example.com", "A", use_edns=0,
                                       options=[dns.edns.ECSOption.from_text(subnet)])
        response = dns.query.udp(query, "127.0.0.1", port=port, timeout=2)
        addresses = ",".join(r.address for rrset in response.answer for r in rrset)
        scope = next((o.scopelen for o in response.options
                      if isinstance(o, dns.edns.ECSOption)), None)
        out.append(f"{subnet}->{addresses}/scope{scope}")
    return " ".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--repeats", type=int, default=3,
                        help="rounds per mix, each running dnsperf against both servers")
    parser.add_argument("--placements", default="pinned,shared",
                        help="which of pinned (--workers 1) and shared (--workers 2) to run")
    parser.add_argument("--mixes", default=",".join(MIXES),
                        help=f"comma-separated, of: {', '.join(MIXES)}")
    parser.add_argument("--dnssec", action="store_true",
                        help="also measure ours signing online, queries with DO set")
    parser.add_argument("--fresh", type=int, default=1_500_000,
                        help="distinct /24s of the new-subnets mix, split over the rounds")
    args = parser.parse_args()
    seconds = min(args.seconds, 10.0)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="dns-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    plain = workdir / "plain.txt"
    plain.write_text("chat.infer.example.com A\n")
    mix_file = workdir / "ecs-mix.bin"
    if not mix_file.exists():
        subprocess.run([PYTHON, ROOT / "bench/dns_gen_queries.py", mix_file], check=True)
    fresh = workdir / f"fresh-{args.fresh}.bin"
    chosen_mixes = args.mixes.split(",")
    fresh6 = workdir / f"fresh6-{args.fresh}.bin"
    for name, path, extra in (("ECS new /24s", fresh, []), ("ECS new /56s", fresh6, ["--ipv6"])):
        if name in chosen_mixes and not Path(f"{path}.0").exists():
            subprocess.run([PYTHON, ROOT / "bench/dns_gen_queries.py", path, "--fresh",
                            str(args.fresh), "--parts", str(args.repeats), *extra], check=True)
    random_names = workdir / "random-names.bin"
    if "random names" in chosen_mixes and not random_names.exists():
        write_random_names(random_names, 500_000)
    # 30,000 distinct subnets: passes at a bounded rate fill every cache (of every
    # worker) first, so the run measures the steady state; the passes are printed.
    warm_30k = {"args": ["-B", "-d", str(mix_file)], "warmup": 10, "warmup_rate": 4000,
                "warmup_passes": 12}
    every = {
        "plain A": {"args": ["-d", str(plain)], "warmup": 2},
        "ECS one /24": {"args": ["-d", str(plain), "-E", ECS_FIXED], "warmup": 2},
        "ECS 30k /24s": warm_30k,
        "ECS new /24s": {"args": lambda r: ["-B", "-d", f"{fresh}.{r}"], "warmup": 0},
        "ECS new /56s": {"args": lambda r: ["-B", "-d", f"{fresh6}.{r}"], "warmup": 0},
        "random names": {"args": ["-B", "-d", str(random_names)], "warmup": 0},
        "ECS 30k + state 1/s": {**warm_30k, "state": True},
    }
    unknown = set(chosen_mixes) - set(every)
    if unknown:
        parser.error(f"unknown mixes {sorted(unknown)}; known: {', '.join(every)}")
    mixes = {name: every[name] for name in chosen_mixes}
    # --workers 2 is measured on the shared cores only: two workers pinned to one core just
    # take turns on it.
    chosen = args.placements.split(",")
    pairs = [(placement, workers) for placement, workers in (("pinned", 1), ("shared", 2))
             if placement in chosen]
    if not pairs or len(pairs) != len(chosen):
        parser.error(f"--placements takes pinned, shared or both, not {args.placements!r}")
    runs: dict[tuple[str, str, str], list[Result]] = {}
    for placement, workers in pairs:
        pin = placement == "pinned"
        ours_name = ours_label(workers)
        servers = [("gdnsd", GDNSD_PORT), (ours_name, OURS_PORT)]
        procs = {"gdnsd": start_gdnsd(workdir, pin), ours_name: start_ours(workers, pin)}
        keys = make_keys(workdir) if args.dnssec else None
        if keys is not None:
            signed_name = signed_label(workers)
            servers.append((signed_name, SIGNED_PORT))
            procs[signed_name] = start_ours(workers, pin, SIGNED_PORT, keys=keys)
        state = signed_state = None
        try:
            if any(mix.get("state") for mix in mixes.values()):
                state = StatefulOurs(workers, pin)
                procs[STATEFUL] = state.proc
                if keys is not None:
                    signed_state = StatefulOurs(workers, pin, STATEFUL_SIGNED_PORT, keys)
                    procs[STATEFUL_SIGNED] = signed_state.proc
            for name, port in servers:
                print(f"# {name} ({placement}): {check_answers(port)}", flush=True)
            for mix_name, mix in mixes.items():
                for repeat in range(args.repeats):
                    # side by side: each round runs both, the first one alternating, so a
                    # drift of the shared machine weighs on both alike
                    for name, port in servers if repeat % 2 == 0 else servers[::-1]:
                        signed = name.startswith("ours signed")
                        target, port = (name, port)
                        if mix.get("state") and name != "gdnsd":
                            target, port = ((STATEFUL_SIGNED, STATEFUL_SIGNED_PORT) if signed
                                            else (STATEFUL, STATEFUL_PORT))
                        r = measure(procs[target], port, signed_mix(mix) if signed else mix,
                                    seconds, pin, warm=repeat == 0, round_=repeat)
                        runs.setdefault((name, placement, mix_name), []).append(r)
                        print(f"  {name} {mix_name}: {r.qps:,.0f} qps, {r.latency_ms:.3f} ms, "
                              f"{r.cpu_us:.1f} us/q, lost {r.lost:.2f}%, RSS {r.rss_mb:.0f} MB",
                              flush=True)
        finally:
            if state is not None:
                print(f"  state writer: {state.writer.writes} rounds of writes", flush=True)
                state.close()
                procs.pop(STATEFUL, None)
            if signed_state is not None:
                signed_state.close()
                procs.pop(STATEFUL_SIGNED, None)
            for proc in procs.values():
                stop(proc)
            time.sleep(0.5)
    print_table(runs, mixes, pairs, signed=args.dnssec)
    shutil.rmtree(workdir / "gdnsd", ignore_errors=True)
    return 0


STATEFUL, STATEFUL_PORT = "ours following the state", 5311
STATEFUL_SIGNED, STATEFUL_SIGNED_PORT = "ours signed following the state", 5313
SIGNED_PORT = 5312
MIXES = ("plain A", "ECS one /24", "ECS 30k /24s", "ECS new /24s", "ECS new /56s",
         "random names", "ECS 30k + state 1/s")


class StatefulOurs:
    """Our server following a real Valkey that a ``LoadWriter`` changes once a second."""

    def __init__(self, workers: int, pin: bool, port: int = STATEFUL_PORT,
                 keys: Path | None = None) -> None:
        from state import EmbeddedValkey

        self.valkey = EmbeddedValkey()
        self.valkey.start()
        self.writer = LoadWriter(self.valkey.url, ["us-east", "eu-west", "eu-central",
                                                   "ap-south"])
        self.proc = start_ours(workers, pin, port, self.valkey.url, keys)

    def close(self) -> None:
        stop(self.proc)
        self.writer.stop()
        self.valkey.stop()


def ours_label(workers: int) -> str:
    """How the table names our server with ``workers`` processes."""
    return f"ours --workers {workers}"


def signed_label(workers: int) -> str:
    return f"ours signed --workers {workers}"


def median_result(runs: list[Result]) -> Result:
    """Each figure's median over the runs."""
    return Result(*(statistics.median(getattr(r, f) for r in runs)
                    for f in ("qps", "latency_ms", "cpu_us", "lost", "rss_mb")))


def print_table(runs: dict, mixes: dict, pairs: list, signed: bool = False) -> None:
    """Medians of each figure, and of the per-round ratios ours / gdnsd (and signed /
    unsigned, median [min, max] over the rounds)."""
    print()
    print("| server | cores | mix | qps | avg latency ms | server CPU us/query | RSS MB | "
          "qps / gdnsd [min, max] | CPU / gdnsd | qps / ours unsigned [min, max] |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for placement, workers in pairs:
        names = ["gdnsd", ours_label(workers)] + ([signed_label(workers)] if signed else [])
        for name in names:
            for mix_name in mixes:
                own = runs[(name, placement, mix_name)]
                base = runs[("gdnsd", placement, mix_name)]
                r = median_result(own)
                rounds = list(zip(own, base, strict=True))
                qps_ratios = [a.qps / b.qps for a, b in rounds]
                cpu_ratio = statistics.median(a.cpu_us / b.cpu_us for a, b in rounds)
                versus = ""
                if name == signed_label(workers):
                    plain = runs[(ours_label(workers), placement, mix_name)]
                    versus = _spread([a.qps / b.qps for a, b in zip(own, plain, strict=True)])
                print(f"| {name} | {placement} | {mix_name} | {r.qps:,.0f} | "
                      f"{r.latency_ms:.3f} | {r.cpu_us:.1f} | {r.rss_mb:.0f} | "
                      f"{_spread(qps_ratios)} | {cpu_ratio:.2f} | {versus} |")


def _spread(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}]"


if __name__ == "__main__":
    socket.setdefaulttimeout(5)
    raise SystemExit(main())
