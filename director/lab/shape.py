"""What the HA lab runs where: hosts, the policy they serve and a process per component.

The default shape is the smallest that has a replica of everything: three state hosts (a
Redis server and a Sentinel on each; the first starts as master), two DNS servers (the
zone's NS set), two admin APIs, and per region two hosts, each with a GPU server (the
simulator), that region's balancer and a probe worker (the region's queue; beat on every
worker, one of them the leader at a time: ``workers.beat_lease``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from director.up.plan import Bind, ChildSpec, director_command
from state.ports import hostport

# where a region of the lab is on the map, by name (a name not here is placed at 0, 0)
LOCATIONS = {"eu-west": ("53.35 -6.26", "EU"), "us-east": ("38.90 -77.04", "US"),
             "eu-central": ("50.11 8.68", "EU"), "ap-south": ("19.08 72.88", "IN")}
GPU_PORT = 8000
BALANCER_PORT = 8080
API_PORT = 8080
DNS_PORT = 53
MODEL = "llama-3.1-8b-instruct"
ZONE = "infer.lab.example"
SERVICE = f"chat.{ZONE}"
TENANT = "lab"


@dataclass(frozen=True)
class LabShape:
    """How many of each: ``regions`` by name, hosts per region, DNS servers, APIs and state
    hosts (an odd number: the Sentinels' quorum is a majority; as many Sentinels, each on
    a host of its own unless ``sentinels_apart`` is off)."""

    regions: tuple[str, ...] = ("eu-west",)
    hosts_per_region: int = 2
    dns_servers: int = 2
    apis: int = 2
    state_hosts: int = 3
    # the Sentinels on hosts of their own (sentinel-N), not beside the servers: a Sentinel
    # cut off beside the old master may turn the new master into its replica when the
    # partition heals (director.up.redis_set)
    sentinels_apart: bool = True

    def __post_init__(self) -> None:
        if not self.regions or min(self.hosts_per_region, self.dns_servers, self.apis,
                                   self.state_hosts) < 1:
            raise ValueError(f"lab shape: at least one of everything, got {self}")

    def sentinel_host_names(self) -> list[str]:
        """The hosts the Sentinels run on: their own, or the state hosts."""
        kind = "sentinel" if self.sentinels_apart else "state"
        return [f"{kind}-{i}" for i in range(1, self.state_hosts + 1)]

    def host_names(self) -> list[str]:
        names = [f"state-{i}" for i in range(1, self.state_hosts + 1)]
        names += self.sentinel_host_names() if self.sentinels_apart else []
        names += [f"dns-{i}" for i in range(1, self.dns_servers + 1)]
        names += [f"api-{i}" for i in range(1, self.apis + 1)]
        names += [f"{region}-{i}" for region in self.regions
                  for i in range(1, self.hosts_per_region + 1)]
        return names


def policy_text(shape: LabShape, address: dict[str, str], gateway_network: str) -> str:
    """The lab's policy: its zone served by the DNS hosts, each region's balancers on its
    hosts with a GPU server on each; the service steers by geography, fails over on
    health and keeps EU clients in EU regions."""
    lines = [f"zone {ZONE} {{", "    ttl 5s"]
    for i in range(1, shape.dns_servers + 1):
        lines.append(f"    ns ns{i}.{ZONE} {address[f'dns-{i}']}")
    lines += [f"    admin-networks 127.0.0.0/8 {gateway_network}", "}", "",
              "jurisdiction EU { countries AT BE DE DK ES FI FR IE IT NL PL PT SE }",
              "jurisdiction US { countries US }", "jurisdiction IN { countries IN }", "",
              "healthcheck gpu { path /health; expect 200; interval 1s; timeout 1s; "
              "metrics /metrics }",
              "healthcheck balancer { path /healthz; expect 200; interval 1s; "
              "timeout 500ms }", "", "state { stale-after 60s }", ""]
    for region in shape.regions:
        location, jurisdiction = LOCATIONS.get(region, ("0 0", "US"))
        hosts = [f"{region}-{i}" for i in range(1, shape.hosts_per_region + 1)]
        lines += [f"region {region} {{", f"    location {location}",
                  f"    jurisdiction {jurisdiction}",
                  f"    endpoints {' '.join(address[h] for h in hosts)}",
                  f"    capacity {len(hosts)} gpus x 8rps", "    healthcheck balancer"]
        lines += [f"    gpu {host} {{ url http://{address[host]}:{GPU_PORT}; models {MODEL} }}"
                  for host in hosts]
        lines += ["}", ""]
    eu = [r for r in shape.regions if LOCATIONS.get(r, ("", ""))[1] == "EU"]
    lines += [f"service {SERVICE} {{", "    ttl 5s", "    steer geo",
              f"    models {MODEL}",
              "    failover { fall 2; rise 2; interval 1s; timeout 500ms }"]
    if eu:
        lines += ["    residency eu { clients jurisdiction EU; allow jurisdiction EU; "
                  "all-down answer-allowed }",
                  f"    unknown-location regions {' '.join(eu)}"]
    lines += ["    all-down answer-nothing", "}", "",
              # clients log in with API keys (critical writes: the drills' ledger)
              "identity { api-keys on }", f"tenant {TENANT} {{ weight 1 }}", ""]
    return "\n".join(lines)


@dataclass(frozen=True)
class Placement:
    """What the component processes need to know: the policy file, the state URL, the
    run directory, and where each host is (name -> (netns, address))."""

    policy: Path
    redis_url: str
    run_dir: Path
    hosts: dict[str, tuple[str, str]]
    role_env: dict[str, dict[str, str]]  # role -> the environment that logs it in


def component_children(shape: LabShape, where: Placement) -> list[ChildSpec]:
    """GPU servers, balancers, workers, DNS servers and APIs, each on its host."""
    policy, url = str(where.policy), where.redis_url
    children: list[ChildSpec] = []
    for region in shape.regions:
        for i in range(1, shape.hosts_per_region + 1):
            host = f"{region}-{i}"
            netns, address = where.hosts[host]
            gpu = (address, GPU_PORT)
            children.append(ChildSpec(
                f"gpu/{region}/{host}", "gpu",
                (sys.executable, "-m", "regions.simulator", "--listen", hostport(gpu),
                 "--name", host, "--model", MODEL),
                region=region, gpu=host, address=f"http://{hostport(gpu)}", ready_tcp=gpu,
                binds=(Bind("tcp", *gpu),), netns=netns))
            listen = (address, BALANCER_PORT)
            children.append(ChildSpec(
                f"balancer/{region}/{i}", "balancer",
                director_command("region", "serve", "--policy", policy, "--region", region,
                                 "--listen", hostport(listen), "--admin-listen",
                                 "127.0.0.1:9180", "--redis", url, "--follow-policy",
                                 "--trusted-network", "10.231.0.0/16"),
                env={**where.role_env["balancer"],
                     "DIRECTOR_BALANCER_STATE_DIR": str(where.run_dir / "balancers" / host)},
                region=region, address=f"http://{hostport(listen)}", ready_tcp=listen,
                binds=(Bind("tcp", *listen),), netns=netns))
            children.append(ChildSpec(
                f"workers/{region}/{i}", "workers",
                director_command("workers", "--policy", policy, "--redis", url,
                                 "--queue", f"probes.{region}", "--loglevel", "WARNING",
                                 "--follow-policy", "--concurrency", "4"),
                env={"DIRECTOR_BALANCER_PORT": str(BALANCER_PORT),
                     **where.role_env["worker"]}, region=region, netns=netns))
    for i in range(1, shape.dns_servers + 1):
        netns, address = where.hosts[f"dns-{i}"]
        listen = (address, DNS_PORT)
        children.append(ChildSpec(
            f"dns/{i}", "dns",
            director_command("dns", "serve", "--policy", policy, "--listen", hostport(listen),
                             "--redis", url, "--follow-policy", "--no-precompile",
                             "--rrl", "log-only", "--metrics", "127.0.0.1:9153"),
            env=where.role_env["dns"], address=f"udp+tcp {hostport(listen)}",
            ready_tcp=listen, binds=(Bind("udp", *listen), Bind("tcp", *listen)),
            netns=netns))
    for i in range(1, shape.apis + 1):
        netns, address = where.hosts[f"api-{i}"]
        listen = (address, API_PORT)
        home = where.run_dir / f"api-{i}"
        children.append(ChildSpec(
            f"api/{i}", "api",
            director_command("api", "serve", "--policy", policy, "--redis", url,
                             "--listen", hostport(listen), "--allow-remote",
                             "--tokens", str(where.run_dir / "tokens.json"),
                             "--audit-log", str(home / "audit.log"),
                             "--policy-store", str(home / "policy"),
                             "--balancer-port", str(BALANCER_PORT),
                             "--dns", ",".join(hostport((where.hosts[f"dns-{j}"][1], DNS_PORT))
                                               for j in range(1, shape.dns_servers + 1))),
            env=where.role_env["api"], address=f"http://{hostport(listen)}",
            ready_tcp=listen, binds=(Bind("tcp", *listen),), netns=netns))
    return children
