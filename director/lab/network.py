"""Separate hosts on one machine: a Linux network namespace per host, routed by this one.

Every host gets its own namespace with one interface (``eth0``) holding one address of
``10.231.<n>.0/24``, linked point to point (a veth pair) to this machine's namespace, which
routes between them (``net.ipv4.ip_forward``) and reaches every host itself, at
``10.231.<n>.1``. Since all traffic between hosts is routed here, a partition is a pair of
policy-routing rules that send the packets between two groups of hosts to a blackhole:
they are dropped silently, as a cut link drops them (a sender sees only timeouts, no
error), without stopping any process. ``heal`` removes the rules.

Needs root (``ip netns``, ``ip rule``); everything made is named ``dlab<n>...`` and removed
by ``destroy``, also after a crash of a previous run (``LabNetwork.create`` clears leftovers
of the same ``n`` first).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

FORWARDING = Path("/proc/sys/net/ipv4/ip_forward")
LINK_GONE_S = 5.0
RULE_PRIORITY = 1000  # the lab's blackhole rules, before the main table's (32766)
ADDRESS_BASE = 10  # host i (from 0) is 10.231.<n>.<10 + i>


class LabNetworkError(Exception):
    """A namespace, link or rule could not be made (not root, no ``ip``, ...)."""


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise LabNetworkError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


@dataclass(frozen=True)
class LabHost:
    """One host: its name, namespace and address."""

    name: str
    netns: str
    address: str
    link: str  # this machine's end of its veth pair


@dataclass
class LabNetwork:
    """The hosts of one lab, numbered ``n`` (1-250): ``10.231.<n>.0/24``."""

    n: int
    hosts: dict[str, LabHost] = field(default_factory=dict)
    _rules: list[tuple[str, str]] = field(default_factory=list)
    _forwarding_was: str = ""

    @property
    def gateway(self) -> str:
        return f"10.231.{self.n}.1"

    @property
    def prefix(self) -> str:
        return f"dlab{self.n}"

    def create(self, names: Iterable[str]) -> LabNetwork:
        """Make a host for each name (in order: addresses .10, .11, ...)."""
        if not 1 <= self.n <= 250:
            raise LabNetworkError(f"lab number {self.n}: expected 1-250")
        self.destroy()  # leftovers of a run that died
        self._forwarding_was = FORWARDING.read_text().strip()
        FORWARDING.write_text("1\n")
        for index, name in enumerate(names):
            self.hosts[name] = self._add_host(index, name)
        return self

    def _add_host(self, index: int, name: str) -> LabHost:
        netns = f"{self.prefix}-{name}"
        link = f"{self.prefix}h{index}"
        address = f"10.231.{self.n}.{ADDRESS_BASE + index}"
        ip("netns", "add", netns)
        ip("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", netns)
        ip("addr", "add", f"{self.gateway}/32", "dev", link)
        ip("link", "set", link, "up")
        ip("route", "add", f"{address}/32", "dev", link)
        inside = ("-n", netns)
        ip(*inside, "addr", "add", f"{address}/32", "dev", "eth0")
        ip(*inside, "link", "set", "eth0", "up")
        ip(*inside, "link", "set", "lo", "up")
        ip(*inside, "route", "add", self.gateway, "dev", "eth0")
        ip(*inside, "route", "add", "default", "via", self.gateway)
        return LabHost(name, netns, address, link)

    def host(self, name: str) -> LabHost:
        try:
            return self.hosts[name]
        except KeyError:
            raise LabNetworkError(f"no host {name!r} (hosts: {', '.join(self.hosts)})") from None

    def partition(self, side: Iterable[str], other: Iterable[str]) -> None:
        """Drop every packet between the hosts of ``side`` and those of ``other``, both ways
        (``other`` may name ``gateway``: this machine, the clients' side)."""
        for a in side:
            for b in other:
                for source, target in ((a, b), (b, a)):
                    self._blackhole(self._address(source), self._address(target))

    def isolate(self, name: str) -> None:
        """Cut ``name`` off from every other host and from this machine."""
        self.partition([name], [*(h for h in self.hosts if h != name), "gateway"])

    def heal(self) -> None:
        """Remove every partition."""
        for source, target in self._rules:
            ip("rule", "del", "from", source, "to", target, "blackhole", check=False)
        self._rules.clear()

    def _address(self, name: str) -> str:
        return self.gateway if name == "gateway" else self.host(name).address

    def _blackhole(self, source: str, target: str) -> None:
        if (source, target) in self._rules:
            return
        ip("rule", "add", "from", source, "to", target, "blackhole", "priority",
           str(RULE_PRIORITY))
        self._rules.append((source, target))

    def destroy(self) -> None:
        """Remove the hosts, their links and rules (also those of an earlier run)."""
        self.heal()
        for line in ip("rule", "show", "priority", str(RULE_PRIORITY), check=False
                       ).stdout.splitlines():
            if f"10.231.{self.n}." in line:
                words = line.split()
                ip("rule", "del", "from", words[words.index("from") + 1], "to",
                   words[words.index("to") + 1], "blackhole", check=False)
        for line in ip("netns", "list", check=False).stdout.splitlines():
            netns = line.split()[0] if line.strip() else ""
            if netns.startswith(self.prefix + "-"):
                ip("netns", "del", netns, check=False)  # takes its veth pair with it...
        # ...but the kernel frees it later: a lab started again at once met the old link
        deadline = time.monotonic() + LINK_GONE_S
        while (links := self._links()) and time.monotonic() < deadline:
            for link in links:
                ip("link", "del", link, check=False)
            time.sleep(0.05)

    def _links(self) -> list[str]:
        """This lab's links left on this machine's side (``dlab<n>h<i>``)."""
        names = []
        for line in ip("-o", "link", "show", check=False).stdout.splitlines():
            parts = line.split(":", 2)
            name = parts[1].strip().split("@")[0] if len(parts) > 1 else ""
            if name.startswith(f"{self.prefix}h"):
                names.append(name)
        return names
        self.hosts.clear()
        if self._forwarding_was:
            FORWARDING.write_text(self._forwarding_was + "\n")
            self._forwarding_was = ""
