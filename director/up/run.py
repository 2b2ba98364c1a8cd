"""``director up`` from options to a running system, until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import socket
import time
from pathlib import Path

import redis
from rich.console import Console

from director.api.policy_disk import PolicyDisk
from director.up import rundir
from director.up.console import print_ready, tail
from director.up.credentials import (
    CREDENTIALS_DIR,
    embedded_logins,
    external_logins,
    role_logins,
)
from director.up.plan import ChildSpec, UpOptions, hostport, plan_children
from director.up.redis_set import RedisSet, redis_set_children
from director.up.supervisor import Supervisor
from policies import PolicySources
from policies.model import Policy
from state.embedded import find_server_binary
from state.errors import StateError
from state.ports import bind_error
from state.store import StateStore

BIND_GRACE_S = 5.0
# where `up --ha` runs its replicated state: a server and a Sentinel on each
HA_STATE_HOSTS = ("127.0.8.1", "127.0.8.2", "127.0.8.3")


class UpError(Exception):
    """``director up`` cannot start (another one runs, Redis unreachable, ...)."""


def publish_policy(redis_url: str, sources: PolicySources, proofs: tuple[str, ...] = (),
                   credentials: redis.CredentialProvider | None = None,
                   history: Path | None = None) -> int:
    """Make the accepted policy the active one in Redis, as every instance follows it there,
    with the digests of the engine ``proofs`` it passed (the children do not run them again),
    numbered above every version in the API's ``history`` directory (the API starts from
    the newest there, and versions never go back)."""
    at_least = PolicyDisk(history).highest() + 1 if history is not None else 0
    store = StateStore.from_url(redis_url, credentials=credentials)
    try:
        return store.set_policy(sources.text, name=sources.name, files=sources.files,
                                proofs=proofs, at_least=at_least)
    finally:
        store.close()


def start_groups(specs: list[ChildSpec]) -> list[list[str]]:
    """Names grouped by start order: Valkey (or the servers and Sentinels of a replicated
    set), GPUs, balancers, workers, the DNSSEC presigner, DNS and API."""
    order = ("valkey", "redis", "sentinel", "gpu", "balancer", "workers", "dnssec", "dns",
             "api")
    groups = [[s.name for s in specs if s.role == role] for role in order]
    return [group for group in groups if group]


def unbindable(specs: list[ChildSpec]) -> list[str]:
    """What cannot be bound now, as ``name: TCP host:port (why)``; checked before anything
    starts so that a taken port is an error at once, not a child restarting forever."""
    kinds = {"tcp": socket.SOCK_STREAM, "udp": socket.SOCK_DGRAM}
    found = []
    for spec in specs:
        for bind in spec.binds:
            error = bind_error(bind.host, bind.port, kinds[bind.protocol])
            if error is not None:
                found.append(f"{spec.name}: {bind} ({error})")
    return found


async def wait_bindable(specs: list[ChildSpec], grace: float) -> list[str]:
    """``unbindable(specs)``, given ``grace`` seconds to become empty: the processes of an
    ``up`` stopped a moment ago may still be letting go of their ports."""
    deadline = time.monotonic() + grace
    problems = unbindable(specs)
    while problems and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        problems = unbindable(specs)
    return problems


async def run_up(policy: Policy, sources: PolicySources, options: UpOptions,
                 console: Console, embedded: bool, proofs: tuple[str, ...] = ()) -> int:
    """Start everything, print where it is, serve until a signal; returns the exit status."""
    run_dir = options.run_dir
    if (run_dir / "control.sock").exists() and await _answers(run_dir / "control.sock"):
        raise UpError(f"another director up is running with run directory {run_dir}")
    rundir.prepare(run_dir)
    valkey: list[ChildSpec] = []
    state_set: RedisSet | None = None
    if embedded and options.ha:
        logins, passwords = role_logins(run_dir)
        state_set, valkey = redis_set_children(
            [(None, address) for address in HA_STATE_HOSTS], run_dir / "state", passwords,
            server_binary=str(find_server_binary()), persist=True)
        options = dataclasses.replace(options, redis_url=state_set.url, logins=logins)
    elif embedded:
        logins, acl = embedded_logins(run_dir)
        server, url = rundir.valkey_child(run_dir, acl)
        valkey = [server]
        options = dataclasses.replace(options, redis_url=url, logins=logins)
    else:
        url, logins = external_logins(run_dir, options.redis_url)
        options = dataclasses.replace(options, redis_url=url, logins=logins)
    tokens = rundir.issue_tokens(run_dir)
    specs = plan_children(policy, options, valkey)
    problems = await wait_bindable(specs, BIND_GRACE_S)
    if problems:
        raise UpError("cannot listen on " + "; ".join(problems) + " (stop what holds them "
                      "or choose others: --dns, --api, --dns-metrics, --balancer-port, "
                      "--balancer-admin-port)")
    supervisor = Supervisor(specs, run_dir, lambda line: console.print(line, markup=False))

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        if not embedded:
            await _publish_and_control(supervisor, options, sources, proofs)
        for group in start_groups(specs):
            if stop.is_set():
                return 130
            console.print(f"starting {', '.join(group)}", markup=False, highlight=False)
            for name in await supervisor.start_group(group):
                child = supervisor.child(name)
                console.print(f"[yellow]{name} is not ready yet; its log "
                              f"({child.log_path}) ends with:[/yellow]")
                console.print(tail(child.log_path), markup=False)
            if group == ["valkey"] or (state_set is not None and "sentinel/1" in group):
                if state_set is not None:  # replicas in sync, every Sentinel agreeing
                    try:
                        await asyncio.to_thread(state_set.wait_ready)
                    except TimeoutError as exc:
                        raise UpError(f"{exc} (logs under {run_dir / 'logs'})") from exc
                await _publish_and_control(supervisor, options, sources, proofs)
        rundir.write_manifest(run_dir, {
            "pid": os.getpid(), "api": f"http://{hostport(options.api)}",
            "dns": hostport(options.dns), "redis": options.redis_url,
            "redis_credentials": str(run_dir / CREDENTIALS_DIR),
            "admin_token_file": str(run_dir / "admin.token"),
            "processes": [child.describe() for child in supervisor.children]})
        print_ready(console, policy, options, specs,
                    {c.spec.name: c.pid for c in supervisor.children}, tokens.read)
        await stop.wait()
        console.print("stopping ...")
        return 0
    except StateError as exc:
        raise UpError(f"cannot store the policy in Redis at {options.redis_url}: {exc}") from exc
    finally:
        await supervisor.stop()
        (run_dir / "up.json").unlink(missing_ok=True)
        console.print("stopped")


async def _publish_and_control(supervisor: Supervisor, options: UpOptions,
                               sources: PolicySources, proofs: tuple[str, ...]) -> None:
    await asyncio.to_thread(publish_policy, options.redis_url, sources, proofs,
                            options.logins.provider("api"),
                            history=options.run_dir / "policy")
    await supervisor.serve_control()


async def _answers(path: Path) -> bool:
    try:
        _reader, writer = await asyncio.open_unix_connection(str(path))
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True
