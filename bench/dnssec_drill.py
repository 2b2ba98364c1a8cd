"""The resolver drill: a validating Unbound resolves through director's DNS server while
a region fails over and the combined signing key is rolled twice; every answer is
counted, and none may be bogus.

Our server runs as ``director dns serve --dnssec-keys DIR --redis URL`` (a real Valkey,
probe results written as probe workers write them). Unbound has the zone's DS as its trust
anchor and keeps nothing in cache, so every query reaches the server and each moment of a
rollover is judged on its own. A client asks Unbound (DO set) every ``--interval`` seconds
for a mix of names: a service's A and AAAA, SOA, NS, DNSKEY, a name that does not exist
and a type a service does not have. The phases:

1. steady;
2. eu-west and us-east down (probe results), then up again;
3. two CSK rollovers, each: the new key published and signing beside the old one
   (``director dnssec rollover``), the parent's DS moved to the new key (Unbound
   restarted with the new anchor: queries during the restart are counted apart as
   unanswered), the new DS confirmed (``confirm-ds`` with the parent's TTL and
   propagation at 0 and the zone's largest TTL waited out), the old key retired and
   removed.

For each phase: queries, validated answers (AD), bogus (SERVFAIL from a running resolver),
unanswered (no reply while Unbound restarted), and the addresses the service's A answers
named (the failover shows there).

    python bench/dnssec_drill.py [--interval 0.02] [--phase 4]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import dns.exception
import dns.flags
import dns.message
import dns.query
import dns.rcode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dns_bench import OURS_PORT, PYTHON, ROOT, stop, wait_udp
from dns_visibility import ProbeWriter

from director.dnssec.key_directory import load_keys, save_keys
from director.dnssec.keys import Role, generate
from director.dnssec.timeline import Ttls, confirm_ds, start_rollover, state_at
from director.lab.resolver import Resolver
from state import EmbeddedValkey

ZONE = "infer.example.com"
POLICY = ROOT / "policies/examples/global.dp"
NAMES = [("chat.infer.example.com", "A"), ("chat.infer.example.com", "AAAA"),
         ("infer.example.com", "SOA"), ("infer.example.com", "NS"),
         ("infer.example.com", "DNSKEY"), ("no-such-name.infer.example.com", "A"),
         ("chat.infer.example.com", "TXT"), ("embed.infer.example.com", "A")]


class Client:
    """Asks the resolver the mix of names in a loop and counts what comes back."""

    def __init__(self, port: int, interval: float) -> None:
        self.port = port
        self.interval = interval
        self.phase = "start"
        self.counts: dict[str, Counter[str]] = {}
        self.answers: dict[str, set[str]] = {}  # chat A addresses seen per phase
        self.bogus: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.wait(self.interval):
            name, rdtype = NAMES[n % len(NAMES)]
            n += 1
            counts = self.counts.setdefault(self.phase, Counter())
            counts["queries"] += 1
            query = dns.message.make_query(name, rdtype, want_dnssec=True)
            try:
                reply = dns.query.udp(query, "127.0.0.1", port=self.port, timeout=1.0)
            except (dns.exception.Timeout, OSError):
                counts["unanswered"] += 1
                continue
            if reply.rcode() == dns.rcode.SERVFAIL:
                counts["bogus"] += 1
                self.bogus.append(f"{self.phase}: {name} {rdtype}")
            elif reply.flags & dns.flags.AD:
                counts["validated"] += 1
                if (name, rdtype) == NAMES[0] and reply.answer:
                    self.answers.setdefault(self.phase, set()).update(
                        rr.address for rr in reply.answer[0])
            else:
                counts["insecure"] += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--interval", type=float, default=0.02)
    parser.add_argument("--phase", type=float, default=4.0, help="seconds per phase")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="dnssec-drill-"))
    keys = workdir / "keys"
    save_keys(keys, [generate(ZONE, Role.CSK, time.time() - 60)])
    quick = Ttls(dnskey=0, largest=1.0, propagation=0.0, parent_ds=0.0)
    with EmbeddedValkey() as valkey:
        probes = ProbeWriter(valkey.url)
        log = (workdir / "dns.log").open("w")
        server = subprocess.Popen(
            [PYTHON, "-m", "director", "dns", "serve", "--policy", str(POLICY), "--listen",
             f"127.0.0.1:{OURS_PORT}", "--redis", valkey.url, "--dnssec-keys", str(keys)],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log,
            env=dict(os.environ, PYTHONPATH=str(ROOT)))
        wait_udp(OURS_PORT)
        anchors = [k.ds_text() for k in state_at(load_keys(keys, ZONE), time.time()).for_parent]
        resolver = Resolver(ZONE, [f"127.0.0.1@{OURS_PORT}"], workdir / "unbound",
                            trust_anchors=anchors).start("chat.infer.example.com")
        client = Client(resolver.port, args.interval)
        try:
            def phase(name: str, seconds: float = args.phase) -> None:
                client.phase = name
                time.sleep(seconds)

            phase("1 steady")
            probes.set("eu-west", False)
            probes.set("us-east", False)
            phase("2 eu-west and us-east down")
            probes.set("eu-west", True)
            probes.set("us-east", True)
            phase("2 back up")
            for roll in (1, 2):
                rolled = start_rollover(load_keys(keys, ZONE), Role.CSK, time.time(), quick)
                save_keys(keys, rolled)
                new = max(rolled, key=lambda k: k.created)
                phase(f"3.{roll} rollover: both keys sign, old DS", args.phase + 5)
                client.phase = f"3.{roll} parent moves the DS (resolver restarts)"
                resolver.restart([new.ds_text()], "chat.infer.example.com")
                phase(f"3.{roll} both keys sign, new DS")
                save_keys(keys, confirm_ds(load_keys(keys, ZONE), new.tag, time.time(),
                                           quick))
                phase(f"3.{roll} old key retired and removed", args.phase + 5)
            phase("4 steady")
        finally:
            client.stop()
            resolver.stop()
            stop(server)
            probes.stop()
            log.close()
    print("\n| phase | queries | validated (AD) | bogus | unanswered | insecure | chat A |")
    print("|---|---|---|---|---|---|---|")
    total: Counter[str] = Counter()
    for name, counts in client.counts.items():
        if name == "start":
            continue
        total.update(counts)
        print(f"| {name} | {counts['queries']} | {counts['validated']} | {counts['bogus']} "
              f"| {counts['unanswered']} | {counts['insecure']} "
              f"| {', '.join(sorted(client.answers.get(name, ())))} |")
    print(f"| all | {total['queries']} | {total['validated']} | {total['bogus']} "
          f"| {total['unanswered']} | {total['insecure']} | |")
    for line in client.bogus[:20]:
        print("bogus:", line)
    return 1 if total["bogus"] or total["insecure"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
