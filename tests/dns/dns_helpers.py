"""Helpers for the DNS tests: building queries, asking a server, bulk UDP, golden text."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dns.edns
import dns.flags
import dns.message
import dns.query
import dns.rdatatype

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"
EU_ADDRESSES = {"127.0.2.1", "127.0.3.1"}


def make_query(name: str, rdtype: str = "A", *, ecs: str | None = None, edns: bool = True,
               payload: int = 1232, qid: int = 4660, **kwargs: object) -> dns.message.Message:
    options = [dns.edns.ECSOption.from_text(ecs)] if ecs else []
    query = dns.message.make_query(name, rdtype, use_edns=0 if edns else False,
                                   payload=payload, options=options, **kwargs)
    query.id = qid
    return query


def ask(address: tuple[str, int], query: dns.message.Message, *, tcp: bool = False,
        timeout: float = 3.0) -> dns.message.Message:
    host, port = address
    if tcp:
        return dns.query.tcp(query, host, port=port, timeout=timeout)
    return dns.query.udp(query, host, port=port, timeout=timeout, ignore_trailing=False)


def ask_wire(address: tuple[str, int], data: bytes, timeout: float = 2.0) -> bytes | None:
    """Send raw bytes over UDP; the raw reply, or None on timeout."""
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.sendto(data, address)
        try:
            return sock.recv(65535)
        except TimeoutError:
            return None


def bulk_udp(address: tuple[str, int], queries: list[bytes], window: int = 500,
             quiet_s: float = 2.0, limit_s: float = 120.0) -> dict[int, bytes]:
    """Send queries (distinct IDs) with up to ``window`` outstanding; replies by ID.

    A query counts as lost only once the server has said nothing for ``quiet_s`` (a busy
    server answering slowly loses nothing; a machine that deschedules a process for
    hundreds of milliseconds is not a drop); the whole exchange is bounded by ``limit_s``."""
    replies: dict[int, bytes] = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 21)
        sock.setblocking(False)
        pending = list(reversed(queries))
        outstanding: set[int] = set()
        heard = time.monotonic()  # the last reply, or the last send into a silent server
        deadline = heard + limit_s
        while (pending or outstanding) and time.monotonic() < deadline:
            if not outstanding:
                heard = time.monotonic()
            while pending and len(outstanding) < window:
                data = pending.pop()
                sock.sendto(data, address)
                outstanding.add(int.from_bytes(data[:2], "big"))
            ready, _, _ = select.select([sock], [], [], 0.2)
            if not ready:
                if time.monotonic() - heard > quiet_s:
                    outstanding.clear()  # the server went quiet: what is left was lost
                continue
            heard = time.monotonic()
            while True:
                try:
                    data = sock.recv(65535)
                except BlockingIOError:
                    break
                qid = int.from_bytes(data[:2], "big")
                replies[qid] = data
                outstanding.discard(qid)
    return replies


def golden_text(response: dns.message.Message) -> str:
    """A response as text with the ID normalised, for golden files."""
    response.id = 0
    return response.to_text() + "\n"


def a_addresses(response: dns.message.Message) -> set[str]:
    return {rdata.address for rrset in response.answer
            if rrset.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA) for rdata in rrset}


def ecs_option(response: dns.message.Message) -> dns.edns.ECSOption | None:
    for option in response.options:
        if isinstance(option, dns.edns.ECSOption):
            return option
    return None


class ServerProcess:
    """``director dns serve`` in a subprocess on a free port; what it logged is ``log``.
    Without the GeoIP network map unless ``precompile``: these servers answer a handful of
    subnets, the map is tested in process, and its build (CPU seconds per worker, at low
    priority) is what the test machine has least of."""

    def __init__(self, *args: str, policy: Path | None = None,
                 precompile: bool = False) -> None:
        self.args = ["--policy", str(policy or ROOT / "policies/examples/global.dp"),
                     "--listen", "127.0.0.1:0", *args,
                     *(() if precompile or "--no-precompile" in args else ("--no-precompile",))]
        self.proc: subprocess.Popen[str] | None = None
        self.address: tuple[str, int] = ("127.0.0.1", 0)
        self.metrics: tuple[str, int] | None = None
        self.log = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed by __exit__)
        self._logged = ""

    def logged(self) -> str:
        """What the server wrote to stderr so far."""
        if self.log.closed:
            return self._logged
        self.log.seek(0)
        return self.log.read()

    def __enter__(self) -> ServerProcess:
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        env = dict(os.environ, PYTHONPATH=path)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "director", "dns", "serve", *self.args],
            stdout=subprocess.PIPE, stderr=self.log, text=True, env=env, cwd=ROOT)
        deadline = time.monotonic() + 30
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("DNS server process exited before listening")
            if line.startswith("metrics "):
                host, port = line.split()[1].rsplit(":", 1)
                self.metrics = (host, int(port))
            if line.startswith("listening "):
                host, port = line.split()[1].rsplit(":", 1)
                self.address = (host.strip("[]"), int(port))
                return self
        raise RuntimeError("DNS server process did not start in time")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._logged = self.logged()
        self.log.close()
