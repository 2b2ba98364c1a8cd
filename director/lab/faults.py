"""The faults an HA drill injects into the lab: real ones (a process SIGKILLed and held
down, packets between hosts dropped), each undone by ``undo``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from director.lab.run import Lab
from director.lab.shape import BALANCER_PORT


@dataclass(frozen=True)
class Injected:
    """What a fault did: ``what`` for the report; ``killed_endpoint``, the base URL of a
    balancer it killed (requests in flight on it may fail: the goal excuses them)."""

    what: str
    killed_endpoint: str | None = None
    held: str | None = None  # the processes killed and held down (restored by ``undo``)


@dataclass(frozen=True)
class Fault:
    name: str
    summary: str
    inject: Callable[[Lab, float], Awaitable[Injected]]
    undo: Callable[[Lab, Injected], Awaitable[None]]
    master_moves: bool = False  # the Sentinels are expected to elect another master


def _master_index(lab: Lab) -> int:
    master = lab.redis.master()
    if master is None:
        raise RuntimeError("no Sentinel names a master")
    return lab.redis.servers.index(master) + 1


async def _kill_master(lab: Lab, hold_s: float) -> Injected:
    index = _master_index(lab)
    lab.kill(f"redis/{index}", hold_s)
    return Injected(f"SIGKILL redis/{index} (the master, {lab.redis.servers[index - 1]}), "
                    f"held down {hold_s:g} s", held=f"redis/{index}")


async def _partition_master(lab: Lab, hold_s: float) -> Injected:
    master = f"state-{_master_index(lab)}"
    hosts = [f"state-{i}" for i in range(1, lab.shape.state_hosts + 1)]
    others = [h for h in dict.fromkeys([*hosts, *lab.shape.sentinel_host_names()])
              if h != master]
    lab.network.partition([master], others)
    return Injected(f"{master} (the master) cut off from {', '.join(others)} (its "
                    "replicas and the Sentinels); clients still reach it")


async def _kill_sentinel(lab: Lab, hold_s: float) -> Injected:
    index = next(i for i in range(1, lab.shape.state_hosts + 1) if i != _master_index(lab))
    lab.kill(f"sentinel/{index}", hold_s)
    return Injected(f"SIGKILL sentinel/{index}, held down {hold_s:g} s",
                    held=f"sentinel/{index}")


async def _kill_dns(lab: Lab, hold_s: float) -> Injected:
    lab.kill("dns/1", hold_s)
    return Injected(f"SIGKILL dns/1 ({lab.address('dns-1')}), held down {hold_s:g} s",
                    held="dns/1")


async def _kill_balancer(lab: Lab, hold_s: float) -> Injected:
    region = lab.shape.regions[0]
    lab.kill(f"balancer/{region}/1", hold_s)
    endpoint = f"http://{lab.address(f'{region}-1')}:{BALANCER_PORT}"
    return Injected(f"SIGKILL balancer/{region}/1 ({endpoint}), held down {hold_s:g} s",
                    killed_endpoint=endpoint, held=f"balancer/{region}/1")


async def _isolate_host(lab: Lab, hold_s: float) -> Injected:
    host = f"{lab.shape.regions[0]}-1"
    lab.network.isolate(host)
    return Injected(f"host {host} (a balancer, a GPU server, a worker) cut off from every "
                    f"other host and the clients", killed_endpoint=(
                        f"http://{lab.address(host)}:{BALANCER_PORT}"))


async def _restore(lab: Lab, injected: Injected) -> None:
    if injected.held:
        lab.restore(injected.held)


async def _heal(lab: Lab, injected: Injected) -> None:
    lab.network.heal()


FAULTS = {fault.name: fault for fault in (
    Fault("master-kill", "the Redis master killed", _kill_master, _restore, True),
    Fault("master-partition", "the Redis master partitioned from its replicas and the other "
          "Sentinels, then healed", _partition_master, _heal, True),
    Fault("sentinel-loss", "a Sentinel killed", _kill_sentinel, _restore),
    Fault("dns-kill", "a DNS server of the NS set killed", _kill_dns, _restore),
    Fault("balancer-kill", "one of a region's balancers killed", _kill_balancer, _restore),
    Fault("host-partition", "a region's host partitioned from everything", _isolate_host,
          _heal),
)}
