"""How long a state change or a policy change takes to show in DNS answers, from outside.

A real Valkey (embedded) holds the state and the policy; our server follows both
(``--redis URL --follow-policy``), one worker pinned to CPU 0, while dnsperf keeps it busy
with the 30,000-subnet mix at ``--load`` queries per second (CPU 1; 0 for none). The
writer, the poller and Valkey run on CPU 1 as well, as other hosts would in a deployment
(``--shared``: anywhere, the server's CPU included, which on two cores puts the writer's
gate and the poller's spinning beside the server). A poller
asks for chat.infer.example.com from 81.2.69.0/24 (a client near eu-west) every half
millisecond, without waiting for the replies:

- **state**: a probe result marks eu-west down (rise = fall = 1, through the state store's
  hysteresis, as a probe worker writes it), then up again; the answer moves to another
  region and back;
- **policy, TTL**: a new version of the policy with the chat service's TTL changed (a new
  value each time) is stored, as the admin API stores it; the answer's TTL changes. The
  gate's engine proof is remembered for such edits (``policy_gate.proof_key``);
- **policy, address**: a new version with eu-west's endpoint changed (a new address each
  time); endpoints are only copied into answers, so the proof is remembered too;
- **policy, spillover threshold**: a new version with the chat service's spillover
  threshold and TTL changed (new values each time, a quarter as many): the proof is
  remembered, since it loads regions at multiples of the threshold
  (``policy_gate.proof_class``);
- **policy, spillover share**: the same with chat's largest spilled share (``max``)
  changed instead of the threshold: the writer's gate runs the engine proof of the chat
  service again (``policy_gate.service_proof_key``), not of the others.

Every policy is written as the admin API writes it: through the policy gate first, stored
with the digests of the engine proofs it ran (``Acceptance.proofs``), which the server,
running the same code, does not run again. The gate's time in the writer comes before the
write, so it is reported on its own, and added to the delay in the spillover share rows' second
line (what an operator waiting on ``PUT /api/v1/policy`` sees).

A writer refreshes every region's probe result twice a second, as probe workers do.

Each delay runs from just before the write to the first answer showing the change; the
table gives p50, p99 and max over ``--changes`` of each kind (the issue's bound: 100 ms p99).

``--dnssec``: the server signs (a key made in the work directory) and the poller sets DO,
so each delay includes signing the changed answer.

    python bench/dns_visibility.py [--changes 100] [--load 150000] [--shared] [--dnssec]
"""

from __future__ import annotations

import argparse
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import dns.edns
import dns.exception
import dns.message

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dns_bench import OURS_PORT, PYTHON, ROOT, make_keys, stop, wait_for_maps, wait_udp

from director import policy_gate
from policies import read_sources
from state import EmbeddedValkey, StateStore

POLICY = ROOT / "policies/examples/global.dp"
CHAT_TTL = "    ttl 5s  #"
REGIONS = ("us-east", "eu-west", "eu-central", "ap-south")
EU_WEST_ENDPOINT = "    endpoints 127.0.2.1\n"
CHAT_SPILL = "        at 85%   #"
CHAT_SHARE = "        max 30%  #"


def query(do: bool = False) -> bytes:
    message = dns.message.make_query("chat.infer.example.com", "A", use_edns=0,
                                     options=[dns.edns.ECSOption.from_text("81.2.69.0/24")],
                                     want_dnssec=do)
    return message.to_wire()


def parse(reply: bytes) -> tuple[str, int] | None:
    """(first address, TTL) of a reply, or None without an answer."""
    try:
        message = dns.message.from_wire(reply)
    except dns.exception.DNSException:
        return None
    for rrset in message.answer:
        return rrset[0].address, rrset.ttl
    return None


def answer(sock: socket.socket, wire: bytes) -> tuple[str, int] | None:
    """(first address, TTL) of the answer, or None when none came within 50 ms."""
    sock.send(wire)
    if not select.select([sock], [], [], 0.05)[0]:
        return None
    return parse(sock.recv(4096))


def wait_change(sock: socket.socket, wire: bytes, changed, started: float,
                timeout: float = 5.0) -> float:
    """Milliseconds from ``started`` until a reply shows ``changed``. A query goes out every
    half millisecond whether or not the last one was answered, so a reply lost under load
    costs its slot, not a timeout; replies to earlier waits are drained first."""
    while select.select([sock], [], [], 0)[0]:
        sock.recv(4096)
    next_send = 0.0
    while (now := time.perf_counter()) - started < timeout:
        if now >= next_send:
            sock.send(wire)
            next_send = now + 0.0005
        if select.select([sock], [], [], 0.0005)[0]:
            got = parse(sock.recv(4096))
            if got is not None and changed(got):
                return (time.perf_counter() - started) * 1000
    raise RuntimeError("the change never showed in the answers")


def start_server(url: str, keys: Path | None = None) -> subprocess.Popen:
    handle, log = tempfile.mkstemp(prefix="dns-visibility-", suffix=".log")
    signing = ["--dnssec-keys", str(keys)] if keys is not None else []
    proc = subprocess.Popen(
        ["taskset", "-c", "0", PYTHON, "-m", "director", "dns", "serve", "--policy", str(POLICY),
         "--listen", f"127.0.0.1:{OURS_PORT}", "--redis", url, "--follow-policy", *signing],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=handle,
        env=dict(os.environ, PYTHONPATH=str(ROOT)))
    os.close(handle)
    wait_udp(OURS_PORT)
    wait_for_maps(Path(log), 1)
    return proc


def start_load(rate: int, seconds: float, workdir: Path) -> subprocess.Popen | None:
    if not rate:
        return None
    mix = workdir / "ecs-mix.bin"
    subprocess.run([PYTHON, ROOT / "bench/dns_gen_queries.py", mix], check=True,
                   stdout=subprocess.DEVNULL)
    return subprocess.Popen(
        ["taskset", "-c", "1", "dnsperf", "-s", "127.0.0.1", "-p", str(OURS_PORT), "-B", "-d",
         str(mix), "-c", "10", "-q", "200", "-Q", str(rate), "-l", str(int(seconds))],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


class ProbeWriter:
    """Writes every region's probe result twice a second, as probe workers do (a region
    without fresh results turns stale, and stale answers carry the degraded TTL)."""

    def __init__(self, url: str) -> None:
        self.store = StateStore.from_url(url)
        self.health = dict.fromkeys(REGIONS, True)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._write_all()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def set(self, region: str, up: bool) -> None:
        with self._lock:
            self.health[region] = up
            self.store.record_probe(region, None, ok=up, rise=1, fall=1)

    def _write_all(self) -> None:
        with self._lock:
            for region, up in self.health.items():
                self.store.record_probe(region, None, ok=up, rise=1, fall=1)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self._write_all()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.store.close()


def publish(store: StateStore, text: str, name: str, files: dict[str, str]
            ) -> tuple[float, float]:
    """Gate ``text`` as the admin API does, then store it with its proofs; returns when the
    gate started and when the write started (``perf_counter``)."""
    gated = time.perf_counter()
    acceptance = policy_gate.accept_text(text, name, files)
    assert acceptance.ok, acceptance.error().render()
    written = time.perf_counter()
    store.set_policy(text, name=name, files=files, proofs=acceptance.proofs)
    return gated, written


def percentiles(delays: list[float]) -> str:
    delays = sorted(delays)
    p = lambda q: delays[min(len(delays) - 1, int(q * len(delays)))]  # noqa: E731
    return f"{p(0.5):.1f} | {p(0.99):.1f} | {delays[-1]:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--changes", type=int, default=100)
    parser.add_argument("--load", type=int, default=150_000)
    parser.add_argument("--shared", action="store_true",
                        help="leave the writer, the poller and Valkey free to run on the "
                        "server's CPU too (by default they share CPU 1 with dnsperf)")
    parser.add_argument("--dnssec", action="store_true",
                        help="the server signs and the poller asks with DO set")
    args = parser.parse_args()
    if not args.shared:  # the outside world on CPU 1; Valkey inherits it
        os.sched_setaffinity(0, {1})
    sources = read_sources(str(POLICY))
    assert CHAT_TTL in sources.text and sources.text.count(EU_WEST_ENDPOINT) == 1
    assert sources.text.count(CHAT_SPILL) == 1 and sources.text.count(CHAT_SHARE) == 1
    workdir = Path(tempfile.mkdtemp(prefix="dns-visibility-"))
    with EmbeddedValkey() as valkey:
        store = StateStore.from_url(valkey.url)
        files = dict(sources.files)
        publish(store, sources.text, sources.name, files)
        proc = start_server(valkey.url, make_keys(workdir) if args.dnssec else None)
        probes = ProbeWriter(valkey.url)
        load = start_load(args.load, args.changes * 0.4 + args.changes // 4 * 1.2 + 30, workdir)
        rows: dict[str, list[float]] = {}
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.connect(("127.0.0.1", OURS_PORT))
            wire = query(args.dnssec)
            time.sleep(1.0)
            home = answer(sock, wire)
            assert home is not None, "no answer"
            delays = rows["eu-west down / up (a probe result)"] = []
            for n in range(args.changes):
                up = n % 2 == 1
                started = time.perf_counter()
                probes.set("eu-west", up)
                delays.append(wait_change(
                    sock, wire, lambda got, up=up: (got[0] == home[0]) is up, started))
                time.sleep(0.02)
            def edits(count: int, edit) -> list[tuple[float, float]]:
                """(the writer's gate, write to answer) in ms for ``count`` edits;
                ``edit(n)`` gives the text and a test of the answer showing it."""
                timed = []
                for n in range(count):
                    text, changed = edit(n)
                    gated, started = publish(store, text, sources.name, files)
                    timed.append(((started - gated) * 1000,
                                  wait_change(sock, wire, changed, started)))
                    time.sleep(0.05)
                return timed

            def with_ttl(ttl: int, *also: str):
                """chat's TTL edited to ``ttl`` (and ``also``: one more line, old and new)."""
                text = sources.text.replace(CHAT_TTL, f"    ttl {ttl}s  #")
                if also:
                    text = text.replace(*also)
                return text, lambda got: got[1] == ttl

            fewer = max(5, args.changes // 4)
            rows["chat TTL, a new value each time (proof remembered)"] = [
                delay for _, delay in edits(args.changes, lambda n: with_ttl(6 + n))]
            rows["eu-west address, a new one each time (proof remembered)"] = [
                delay for _, delay in edits(args.changes, lambda n: (
                    sources.text.replace(EU_WEST_ENDPOINT,
                                         f"    endpoints 127.0.2.{10 + n % 200}\n"),
                    lambda got, n=n: got[0] == f"127.0.2.{10 + n % 200}"))]
            rows["chat spillover threshold and TTL (proof remembered)"] = [
                delay for _, delay in edits(fewer, lambda n: with_ttl(
                    200 + n, CHAT_SPILL, f"        at {60 + n % 35}.5%   #"))]
            timed = edits(fewer, lambda n: with_ttl(
                300 + n, CHAT_SHARE, f"        max {10 + n % 60}%  #"))
            rows["chat spillover share and TTL (the writer proves chat again)"] = [
                delay for _, delay in timed]
            rows["the same, the writer's gate alone"] = [gate for gate, _ in timed]
            rows["the same, from the gate's start (as a PUT sees it)"] = [
                gate + delay for gate, delay in timed]
        finally:
            if load is not None:
                load.kill()
                load.wait()
            stop(proc)
            probes.stop()
            store.close()
    signing = " signing" if args.dnssec else ""
    print(f"\nOur server{signing} following a Valkey, {args.load:,} qps of the 30k mix beside "
          f"the poller; {args.changes} changes of each kind.\n")
    print("| change | count | p50 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|")
    for label, delays in rows.items():
        print(f"| {label} | {len(delays)} | {percentiles(delays)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
