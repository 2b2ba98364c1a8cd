"""A real recursive resolver in front of the lab's NS set: Unbound, with the lab's zone as
a stub zone served by every DNS host, and no cache (every query reaches an authority), so
what a client sees when a DNS server dies is Unbound's own retry across the NS set.

With ``trust_anchors`` (DS records in presentation format) Unbound validates the zone
(DNSSEC) instead of treating it as insecure: answers it can prove carry AD, and answers it
cannot are SERVFAIL (bogus). A server given as ``ADDR@PORT`` is asked on that port."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import dns.message
import dns.query
import dns.rdatatype

from state.ports import free_port


class Resolver:
    """``unbound`` on 127.0.0.1:``port``; ``start`` then ``stop``."""

    def __init__(self, zone: str, servers: Sequence[str], folder: Path,
                 trust_anchors: Sequence[str] = ()) -> None:
        self.zone = zone
        self.servers = tuple(servers)
        self.folder = folder
        self.trust_anchors = tuple(trust_anchors)
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, probe_name: str, timeout: float = 15.0, *,
              require_answer: bool = True) -> Resolver:
        """Start Unbound and wait until it answers ``probe_name`` (with records, unless
        ``require_answer`` is false: any reply will do)."""
        binary = shutil.which("unbound") or "/usr/sbin/unbound"
        if not Path(binary).exists():
            raise FileNotFoundError("unbound is needed (apt-get install unbound)")
        self.folder.mkdir(parents=True, exist_ok=True)
        conf = self.folder / "unbound.conf"
        stubs = "\n".join(f"    stub-addr: {address}" for address in self.servers)
        if self.trust_anchors:
            security = "\n".join(f'    trust-anchor: "{ds}"' for ds in self.trust_anchors) + \
                '\n    module-config: "validator iterator"\n    val-log-level: 2' \
                '\n    val-bogus-ttl: 1'
        else:
            security = f'    domain-insecure: "{self.zone}"\n    module-config: "iterator"'
        conf.write_text(f"""server:
    interface: 127.0.0.1
    port: {self.port}
    do-daemonize: no
    username: ""
    chroot: ""
    directory: "{self.folder}"
    pidfile: ""
    use-syslog: no
    logfile: "{self.folder / 'unbound.log'}"
    verbosity: 0
    access-control: 127.0.0.0/8 allow
    do-not-query-localhost: no
    cache-max-ttl: 0
    cache-max-negative-ttl: 0
    prefetch: no
    qname-minimisation: no
{security}
stub-zone:
    name: "{self.zone}"
{stubs}
""")
        self.process = subprocess.Popen([binary, "-d", "-c", str(conf)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"unbound exited with status {self.process.returncode} "
                                   f"(configuration: {conf})")
            try:
                query = dns.message.make_query(probe_name, dns.rdatatype.A)
                reply = dns.query.udp(query, "127.0.0.1", timeout=1.0, port=self.port)
                if reply.answer or not require_answer:
                    return self
            except (OSError, dns.exception.DNSException):
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError("unbound did not answer for the lab's zone")

    def restart(self, trust_anchors: Sequence[str], probe_name: str) -> Resolver:
        """Start again with other trust anchors (the parent's DS set changed)."""
        self.stop()
        self.trust_anchors = tuple(trust_anchors)
        return self.start(probe_name)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
