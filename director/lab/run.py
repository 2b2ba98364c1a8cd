"""Start the HA lab, keep it running, inject faults into it, take it down.

``Lab.start`` lays the hosts out (:mod:`director.lab.network`), writes the policy and
every role's credentials, starts the Redis set and waits until its Sentinels can fail
over, stores the policy there, then starts the components host by host
(:mod:`director.lab.shape`) under ``director up``'s supervisor (restarted when they die,
killed and held down on purpose by ``kill``). ``stop`` stops them and removes the hosts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from director.lab.network import LabNetwork
from director.lab.shape import LabShape, Placement, component_children, policy_text
from director.policy_gate import accept
from director.up import rundir
from director.up.credentials import CREDENTIALS_DIR, StateLogins, role_logins
from director.up.plan import ChildSpec
from director.up.redis_set import RedisSet, SentinelTimings, redis_set_children
from director.up.supervisor import Supervisor
from policies import PolicySources
from state.acl import ROLES
from state.credentials import role_env
from state.store import StateStore

log = logging.getLogger(__name__)
START_ORDER = ("redis", "sentinel", "gpu", "balancer", "workers", "dns", "api")


@dataclass
class Lab:
    """One lab: its shape, number (``10.231.<n>.0/24``) and run directory."""

    shape: LabShape
    run_dir: Path
    n: int = 77
    timings: SentinelTimings = field(default_factory=SentinelTimings)
    events: Callable[[str], None] = log.info
    network: LabNetwork = field(init=False)
    redis: RedisSet = field(init=False)
    supervisor: Supervisor = field(init=False)
    policy_path: Path = field(init=False)
    logins: StateLogins = field(init=False)
    started_s: float = 0.0  # how long start() took

    def __post_init__(self) -> None:
        self.network = LabNetwork(self.n)

    def address(self, host: str) -> str:
        return self.network.host(host).address

    async def start(self) -> Lab:
        """Everything up and ready; raises (after taking down what it started) if not."""
        began = time.monotonic()
        self._clear_run_dir()
        rundir.prepare(self.run_dir)
        try:
            self.network.create(self.shape.host_names())
            specs = self._plan()
            self.supervisor = Supervisor(specs, self.run_dir, self.events)
            await self._start_roles("redis", "sentinel")
            await asyncio.to_thread(self.redis.wait_ready)
            await asyncio.to_thread(self._publish_policy)
            await self._start_roles("gpu", "balancer", "workers", "dns", "api")
        except BaseException:
            await self.stop()
            raise
        self.started_s = time.monotonic() - began
        self._write_manifest()
        return self

    def _clear_run_dir(self) -> None:
        """Forget what an earlier lab left here: its APIs' policy stores would otherwise
        bring back its policy (and its addresses) as the newest version."""
        for pattern in ("api-*", "balancers", "state", "unbound", "policy", "lab.dp",
                        "lab.json"):
            for path in self.run_dir.glob(pattern):
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)

    def _plan(self) -> list[ChildSpec]:
        hosts = {name: (host.netns, host.address) for name, host in self.network.hosts.items()}
        addresses = {name: address for name, (_, address) in hosts.items()}
        self.policy_path = self.run_dir / "lab.dp"
        self.policy_path.write_text(policy_text(self.shape, addresses,
                                                f"10.231.{self.n}.0/24"))
        acceptance = accept(str(self.policy_path))
        if acceptance.policy is None:
            raise LabStartError(acceptance.error().render())
        self.logins, passwords = role_logins(self.run_dir)
        folder = self.run_dir / CREDENTIALS_DIR
        state_hosts = [hosts[f"state-{i}"] for i in range(1, self.shape.state_hosts + 1)]
        self.redis, redis_children = redis_set_children(
            state_hosts, self.run_dir / "state", passwords, self.timings,
            sentinels=[hosts[name] for name in self.shape.sentinel_host_names()])
        rundir.issue_tokens(self.run_dir)
        placement = Placement(self.policy_path, self.redis.url, self.run_dir, hosts,
                              {role: role_env(role, folder / f"{role}.password")
                               for role in ROLES})
        return redis_children + component_children(self.shape, placement)

    async def _start_roles(self, *roles: str) -> None:
        for role in roles:
            names = [c.spec.name for c in self.supervisor.children if c.spec.role == role]
            if not names:
                continue
            late = await self.supervisor.start_group(names)
            if late:
                raise LabStartError(f"not ready: {', '.join(late)} (logs under "
                                    f"{self.run_dir / 'logs'})")

    def _publish_policy(self) -> None:
        store = self.store("api")
        try:
            store.set_policy(self.policy_path.read_text(), name="lab.dp")
        finally:
            store.close()

    def store(self, role: str = "api") -> StateStore:
        """A store on the lab's Redis set, logged in as ``role``."""
        return StateStore.from_url(self.redis.url, credentials=self.logins.provider(role))

    def sources(self) -> PolicySources:
        return PolicySources("lab.dp", self.policy_path.read_text(), {})

    def admin_token(self) -> str:
        return (self.run_dir / "admin.token").read_text().strip()

    def kill(self, pattern: str, hold_s: float) -> list[str]:
        """SIGKILL the processes named by ``pattern`` (``redis/1``, ``dns/*``), held down
        ``hold_s`` seconds, then restarted by the supervisor."""
        return self.supervisor.act("kill", [pattern], hold_s)

    def restore(self, pattern: str) -> list[str]:
        return self.supervisor.act("restore", [pattern], 0.0)

    def _write_manifest(self) -> None:
        manifest = {"hosts": {name: host.address for name, host in self.network.hosts.items()},
                    "state": self.redis.url, "policy": str(self.policy_path),
                    "admin_token_file": str(self.run_dir / "admin.token"),
                    "started_s": round(self.started_s, 2),
                    "processes": self.supervisor.processes()}
        (self.run_dir / "lab.json").write_text(json.dumps(manifest, indent=2) + "\n")

    async def stop(self) -> None:
        """Stop every process and remove the hosts."""
        supervisor = getattr(self, "supervisor", None)
        if supervisor is not None:
            await supervisor.stop()
        await asyncio.to_thread(self.network.destroy)


class LabStartError(Exception):
    """A component of the lab did not come up."""
