"""Which processes ``director up`` runs for a policy: names, commands, addresses, readiness."""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from director.up.credentials import StateLogins
from policies.model import GpuServer, Policy
from state.ports import hostport, is_loopback

BALANCER_PORT = 8080
BALANCER_STATE_DIR_ENV = "DIRECTOR_BALANCER_STATE_DIR"  # `region serve --state-dir`
BALANCER_ADMIN_PORT = 9180  # each balancer's admin listener (/metrics, /_admin/*), loopback
# director up's edge: the machine itself (every client of an embedded run is local)
LOOPBACK_EDGE = ("127.0.0.0/8", "::1/128")
# Relative speed of a simulated server by GPU kind when the policy gives no speed hint.
KIND_SPEED = {"H100": 1.0, "H200": 1.2, "A100": 0.6, "L40S": 0.5, "A10G": 0.3}


@dataclass(frozen=True)
class ChildSpec:
    """One process to run: ``name`` is unique (``balancer/eu-west``, ``gpu/eu-west/g1``)."""

    name: str
    role: str  # valkey | dns | api | workers | balancer | gpu
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    region: str | None = None
    gpu: str | None = None
    address: str | None = None  # what it serves, for the operator
    ready_tcp: tuple[str, int] | None = None  # ready once this TCP port accepts
    binds: tuple[Bind, ...] = ()  # what it listens on, checked free before anything starts
    netns: str | None = None  # the network namespace it runs in (a host of the HA lab)

    def command(self) -> tuple[str, ...]:
        """What to execute: ``argv``, inside ``netns`` when it has one."""
        return ("ip", "netns", "exec", self.netns, *self.argv) if self.netns else self.argv


@dataclass(frozen=True)
class Bind:
    """One address a child listens on: ``protocol`` is ``tcp`` or ``udp``."""

    protocol: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.protocol.upper()} {hostport((self.host, self.port))}"


@dataclass(frozen=True)
class UpOptions:
    """Where everything goes; the defaults are the issue's (DNS 5353, API 8080)."""

    policy_path: Path
    run_dir: Path
    redis_url: str
    simulate: bool = False
    dns: tuple[str, int] = ("127.0.0.1", 5353)
    api: tuple[str, int] = ("127.0.0.1", 8080)
    dns_metrics: tuple[str, int] = ("127.0.0.1", 9153)
    balancer_port: int = BALANCER_PORT
    balancer_admin_port: int = BALANCER_ADMIN_PORT
    time_scale: float = 1.0
    geoip: Path | None = None
    dns_precompile: bool = True
    logins: StateLogins = field(default_factory=StateLogins)  # each role's state user
    # replicas of every tier: two DNS servers, two admin APIs, two probe workers, and a
    # balancer on every endpoint of a region (the state a Sentinel set: run.py)
    ha: bool = False
    # sign the zone with the keys in run_dir/dnssec-keys (made on first use); with ha, the
    # DNS servers hold no key and a presigner publishes their signatures
    dnssec: bool = False

    @property
    def dnssec_keys(self) -> Path:
        return self.run_dir / "dnssec-keys"


def director_command(*args: str) -> tuple[str, ...]:
    return (sys.executable, "-m", "director", *args)


def log_name(name: str) -> str:
    return name.replace("/", "_") + ".log"


def gpu_listen(gpu: GpuServer) -> tuple[str, int]:
    parts = urlsplit(gpu.url)
    if not parts.hostname:
        raise ValueError(f"GPU server {gpu.name}: no host in {gpu.url!r}")
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def gpu_speed(gpu: GpuServer) -> float:
    if gpu.speed is not None:
        return gpu.speed
    return KIND_SPEED.get((gpu.kind or "").upper(), 1.0)


DEFAULT_WAKE_S = 5.0  # a standby simulator's wake when the policy gives none (wall seconds)


def simulator_child(region: str, gpu: GpuServer, time_scale: float) -> ChildSpec:
    host, port = gpu_listen(gpu)
    argv = [sys.executable, "-m", "regions.simulator", "--listen", hostport((host, port)),
            "--name", gpu.name, "--speed", repr(gpu_speed(gpu)), "--time-scale", repr(time_scale),
            "--engine", gpu.engine]
    for model in gpu.models:
        argv += ["--model", model]
    if gpu.max_seqs:  # as vLLM's --max-num-seqs: the batch the policy says it runs
        argv += ["--max-num-seqs", str(gpu.max_seqs)]
    if gpu.priority_scheduling:  # the balancer sends it priorities, as to such a vLLM
        argv += ["--scheduling-policy", "priority"]
    for model, fingerprint in gpu.fingerprints:  # it serves what the policy declares
        argv += ["--root", f"{model}={fingerprint}"]
    if gpu.standby:  # asleep until its balancer wakes it, in the wall time the policy says
        argv += ["--asleep", "--wake-s", repr((gpu.wake_s or DEFAULT_WAKE_S) * time_scale)]
    if gpu.adapter_slots:  # LoRA on: it holds, and may batch, as many adapters as declared
        argv += ["--max-loras", str(gpu.adapter_slots),
                 "--max-cpu-loras", str(gpu.adapter_slots)]
    return ChildSpec(f"gpu/{region}/{gpu.name}", "gpu", tuple(argv), region=region,
                     gpu=gpu.name, address=gpu.url, ready_tcp=(host, port),
                     binds=(Bind("tcp", host, port),))


def balancer_child(policy_path: Path, region_name: str, host: str, options: UpOptions,
                   admin: tuple[str, int] | None = None, index: int = 1) -> ChildSpec:
    """A region's balancer on ``host``; its admin listener on ``admin`` (default: the same
    host, which is loopback in an embedded run, and ``options.balancer_admin_port``). The
    region's first is ``balancer/<region>``, the next ``balancer/<region>/<index>``."""
    listen = (host, options.balancer_port)
    admin = admin or (host, options.balancer_admin_port)
    argv = director_command("region", "serve", "--policy", str(policy_path), "--region",
                            region_name, "--listen", hostport(listen), "--admin-listen",
                            hostport(admin), "--redis", options.redis_url, "--follow-policy",
                            *geoip_args(options), *edge_args())
    name = region_name if index == 1 else f"{region_name}/{index}"
    env = {**options.logins.env("balancer"),
           BALANCER_STATE_DIR_ENV: str(options.run_dir / "balancers" / name.replace("/", "-"))}
    return ChildSpec(f"balancer/{name}", "balancer", argv, env=env, region=region_name,
                     address=f"http://{hostport(listen)} (admin http://{hostport(admin)})",
                     ready_tcp=listen,
                     binds=(Bind("tcp", *listen), Bind("tcp", *admin)))


def admin_address(host: str, options: UpOptions, taken: set[tuple[str, int]]
                  ) -> tuple[str, int]:
    """Where a balancer on ``host`` has its admin listener: that host when it is loopback,
    else 127.0.0.1 (off loopback it would need a token); the next port when taken."""
    admin_host = host if is_loopback(host) else "127.0.0.1"
    port = options.balancer_admin_port
    while (admin_host, port) in taken:
        port += 1
    taken.add((admin_host, port))
    return admin_host, port




def edge_args() -> tuple[str, ...]:
    """``director up``'s own edge: the machine itself, so that a client on it (the printed
    curl, the drills) may say who it stands for with the X-Director-Client-* headers."""
    return tuple(arg for network in LOOPBACK_EDGE for arg in ("--trusted-network", network))


def dnssec_args(options: UpOptions) -> tuple[str, ...]:
    """How a DNS server signs: with the keys, or (HA: keyless edges) with what the
    presigner publishes."""
    if not options.dnssec:
        return ()
    if options.ha:
        return ("--dnssec-presigned",)
    return ("--dnssec-keys", str(options.dnssec_keys))


def geoip_args(options: UpOptions) -> tuple[str, ...]:
    return ("--geoip", str(options.geoip)) if options.geoip else ()


def plan_children(policy: Policy, options: UpOptions, state: Sequence[ChildSpec] = ()
                  ) -> list[ChildSpec]:
    """Every child in start order: the state server(s), GPU simulators, balancers, workers,
    DNS, API."""
    policy_path = options.policy_path
    children: list[ChildSpec] = list(state)
    if options.simulate:
        for region in policy.regions:
            children += [simulator_child(region.name, gpu, options.time_scale)
                         for gpu in region.gpus]
    admin_taken: set[tuple[str, int]] = set()
    for region in policy.regions:
        hosts = balancer_hosts(region.endpoints_v4, region.endpoints_v6)
        for index, host in enumerate(hosts[:None if options.ha else 1], start=1):
            children.append(balancer_child(policy_path, region.name, host, options,
                                           admin_address(host, options, admin_taken), index))
    replicas = 2 if options.ha else 1
    for index in range(1, replicas + 1):
        children.append(ChildSpec(
            _numbered("workers", index, replicas), "workers",
            director_command("workers", "--policy", str(policy_path), "--redis",
                             options.redis_url, "--loglevel", "WARNING", "--follow-policy"),
            env={"DIRECTOR_BALANCER_PORT": str(options.balancer_port),
                 **options.logins.env("worker")}))
    if options.dnssec and options.ha:  # before the DNS servers, which wait for it
        children.append(ChildSpec(
            "dnssec/presign", "dnssec",
            director_command("dnssec", "presign", "--policy", str(policy_path), "--keys",
                             str(options.dnssec_keys), "--redis", options.redis_url),
            env=options.logins.env("api")))
    dns_listens = [replica_address(options.dns, i) for i in range(replicas)]
    for index, listen in enumerate(dns_listens, start=1):
        metrics = replica_address(options.dns_metrics, index - 1)
        children.append(ChildSpec(
            _numbered("dns", index, replicas), "dns",
            director_command("dns", "serve", "--policy", str(policy_path), "--listen",
                             hostport(listen), "--redis", options.redis_url,
                             "--follow-policy", "--metrics", hostport(metrics),
                             *geoip_args(options), *dnssec_args(options),
                             *(() if options.dns_precompile else ("--no-precompile",))),
            env=options.logins.env("dns"),
            address=f"udp+tcp {hostport(listen)}", ready_tcp=listen,
            binds=(Bind("udp", *listen), Bind("tcp", *listen), Bind("tcp", *metrics))))
    run = options.run_dir
    for index in range(1, replicas + 1):
        listen = replica_address(options.api, index - 1)
        # the first API holds the control socket and the run directory's audit log and
        # policy history; a replica keeps its own beside them
        home = run if index == 1 else run / f"api-{index}"
        control = ("--control", str(run / "control.sock")) if index == 1 else ()
        children.append(ChildSpec(
            _numbered("api", index, replicas), "api",
            director_command("api", "serve", "--policy", str(policy_path), "--redis",
                             options.redis_url, "--listen", hostport(listen),
                             "--tokens", str(run / "tokens.json"),
                             "--audit-log", str(home / "audit.log"), *control,
                             "--dns", ",".join(hostport(d) for d in dns_listens),
                             "--policy-store", str(home / "policy"),
                             "--balancer-port", str(options.balancer_port),
                             "--enable-chaos", *geoip_args(options)),
            env=options.logins.env("api"),
            address=f"http://{hostport(listen)}", ready_tcp=listen,
            binds=(Bind("tcp", *listen),)))
    return children


def balancer_hosts(v4: tuple[str, ...], v6: tuple[str, ...]) -> list[str]:
    """The distinct hosts of a region's endpoints (an IPv4-mapped IPv6 address is its IPv4
    address's host), in the policy's order: a balancer listens on each."""
    hosts: dict[str, None] = {}
    for address in (*v4, *v6):
        parsed = ipaddress.ip_address(address)
        mapped = parsed.ipv4_mapped if isinstance(parsed, ipaddress.IPv6Address) else None
        hosts.setdefault(str(mapped or parsed), None)
    return list(hosts)


def replica_address(listen: tuple[str, int], offset: int) -> tuple[str, int]:
    """The ``offset``-th replica's address of a loopback ``listen``: the next loopback
    address, same port (127.0.0.1:5353, 127.0.0.2:5353); off loopback the next port."""
    host, port = listen
    if offset == 0:
        return listen
    address = ipaddress.ip_address(host)
    if address.version == 4 and address.is_loopback:
        return str(address + offset), port
    return host, port + offset


def _numbered(role: str, index: int, count: int) -> str:
    return role if count == 1 else f"{role}/{index}"
