"""``director dns serve``: run the authoritative DNS server until SIGINT or SIGTERM.

``serve(policy_path, listen, geoip, workers, metrics_listen, rrl_mode)`` is what the
``director`` CLI wires (``director.commands.dns``, the one command line). On start it
prints ``listening <addr>:<port> ...`` on stdout (useful with port 0).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import cast

from director import policy_gate
from director.dns.app import DnsApp
from director.dns.control_thread import ControlThread
from director.dns.heap import settle_when_ready
from director.dns.metrics import DnsStats, serve_metrics
from director.dns.policy_thread import policy_follower_thread
from director.dns.ratelimit import RrlMode, default_mode
from director.dns.server import DnsServer, ServerConfig, new_event_loop
from director.dns.snapshot_source import SnapshotSource, StaticSnapshotSource
from director.dns.transports.sockets import bind_sockets, parse_listen
from director.dns.transports.workers import SocketSource, run_workers
from director.dnssec.signer import ZoneSigner
from director.geo import GeoLocator
from director.geo_map_cache import default_folder
from director.refresh.refresher import SnapshotRefresher
from policies import PolicyError
from policies.model import Policy
from state.aio import AsyncStateStore
from state.instances import this_process
from state.policy_identity import PolicyIdentity
from telemetry.otel import check_env as check_tracing_env
from telemetry.otel import tracing_from_env

log = logging.getLogger(__name__)

SnapshotFactory = Callable[[Policy], SnapshotSource]
MAP_WAIT = 120.0  # seconds a worker waits for its network map before answering anyway


def serve(policy_path: str, listen: str = "127.0.0.1:5353", geoip: str | None = None,
          workers: int = 1, metrics_listen: str | None = None, rrl_mode: str | None = None,
          *, rrl_rate: float = 20.0, rrl_slip: int = 2, tcp_idle_timeout: float = 10.0,
          tcp_max_frame: int = 16384, tcp_max_connections: int = 1024,
          tcp_max_per_network: int = 16,
          snapshot_factory: SnapshotFactory | None = None,
          follow_policy: str | None = None, precompile: bool = True,
          udp_reader_threads: bool = False, dnssec_keys: str | None = None,
          dnssec_presigned: str | None = None, map_cache: str | None = "",
          answer_before_map: bool = False) -> int:
    """Serve ``policy_path``'s zone on ``listen`` ('ADDR:PORT[,ADDR:PORT...]', IPv6 as
    '[::1]:53', port 0 = any) until SIGINT/SIGTERM; returns the exit status.

    ``geoip``: a MaxMind City/Country .mmdb (default: the bundled GeoLite2 City 2018).
    ``workers``: processes sharing the port with SO_REUSEPORT. ``metrics_listen``:
    'ADDR:PORT' for Prometheus metrics. ``rrl_mode``: off | log-only | enforce (default:
    log-only when every listen address is loopback, else enforce), with ``rrl_rate``
    responses a second per /24 or /56 and ``rrl_slip`` (docs/dns-rate-limiting.md).
    ``tcp_max_connections`` TCP connections at once per worker, at most
    ``tcp_max_per_network`` of them from one client /24 or /56; a connection that completes
    no query within ``tcp_idle_timeout`` seconds is closed.
    ``snapshot_factory(policy)``: the state source, called in each worker after it starts
    (default: an empty in-process snapshot, every region healthy); a source that is an async
    context manager (``SnapshotRefresher``) is entered on a control thread of the worker.
    ``follow_policy``: a Redis URL whose stored policy each worker follows: a new version is
    proven and swapped in; one that fails to load is logged and the last good one serves.
    The refresher and the follower run on threads of their own (``control_thread``), off
    the loop that answers.
    SIGHUP reloads the policy file the same way. ``precompile``: each worker merges the
    GeoIP database's IPv4 space ahead of time on a low-priority thread
    (``director.geo_map``; about ten seconds), after which a client subnet never seen
    before costs a binary search. ``udp_reader_threads``: read each UDP socket on a thread
    of its own (``udp_reader``): memo hits faster, never-seen client subnets slower (every
    miss crosses to the event loop), so off by default (``docs/research/dns-transport.md``).
    ``dnssec_keys``: a key directory (``director dnssec keygen``): answers to DO queries are
    signed online with the zone's keys, followed through rollovers (docs/dnssec.md).
    ``answer_before_map``: with ``precompile``, answer while the map is built (every
    never-seen subnet then takes the slow path, and under load the build takes far longer);
    by default a worker answers nothing until its map is there, as gdnsd compiles before it
    answers (a stored map makes that instant).
    ``map_cache``: the folder where built network maps are kept across restarts ("": the
    user's cache folder, ``geo_map_cache.default_folder``; None: keep none).
    ``dnssec_presigned``: a Redis URL: sign with the signatures ``director dnssec presign``
    publishes there, holding no key (a keyless edge).
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})  # until the handler is in
    acceptance = policy_gate.accept(policy_path)
    if acceptance.policy is None:
        raise acceptance.error()
    policy, identity = acceptance.policy, acceptance.identity()
    GeoLocator(geoip).close()  # fail here, not in every worker, on a bad database path
    keys = Path(dnssec_keys) if dnssec_keys else None
    maps = None if map_cache is None else Path(map_cache) if map_cache else default_folder()
    if keys is not None:  # fail here on a zone without a usable key
        ZoneSigner(policy.zone.apex, keys, int(policy.zone.ttl))
    addresses = parse_listen(listen)
    mode = RrlMode(rrl_mode) if rrl_mode else default_mode(host for host, _ in addresses)
    if tcp_max_connections < 1 or tcp_max_per_network < 1:
        raise ValueError("the TCP connection caps must be at least 1")
    config = ServerConfig(listen=addresses, tcp_idle_timeout=tcp_idle_timeout,
                          udp_threads=udp_reader_threads, tcp_max_frame=tcp_max_frame,
                          tcp_max_connections=tcp_max_connections,
                          tcp_max_per_network=tcp_max_per_network, reuse_port=workers > 1)
    log.info("response rate limiting: %s (%g responses/s per network, slip %d)",
             mode.value, rrl_rate, rrl_slip)
    factory = snapshot_factory or (lambda _policy: StaticSnapshotSource())

    check_tracing_env()  # each worker builds its own tracer, after the fork

    def worker_main(sockets: SocketSource | None,
                    report: Callable[[DnsStats], Awaitable[None]] | None) -> int:
        tracing = tracing_from_env("director-dns", "director.dns")
        tracer = tracing.tracer if tracing is not None else None

        def make_app(snapshots: SnapshotSource) -> DnsApp:
            return DnsApp(policy, GeoLocator(geoip), snapshots, rrl_mode=mode,
                          rrl_rate=rrl_rate, rrl_slip=rrl_slip, precompile=precompile,
                          tracer=tracer, dnssec_keys=keys, dnssec_presigned=dnssec_presigned,
                          map_cache=maps if precompile else None)

        loop = new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            return loop.run_until_complete(
                _run(make_app, factory(policy), config, sockets, report,
                     metrics_listen if sockets is None else None, follow_policy,
                     lambda: policy_gate.load(policy_path), identity,
                     wait_for_map=not answer_before_map))
        finally:
            loop.close()
            if tracing is not None:
                tracing.shutdown()

    if workers <= 1:
        return worker_main(None, None)
    return run_workers(config, workers, worker_main, metrics_listen, announce=_announce)


async def _run(make_app: Callable[[SnapshotSource], DnsApp], source: SnapshotSource,
               config: ServerConfig, sockets: SocketSource | None,
               report: Callable[[DnsStats], Awaitable[None]] | None,
               metrics_listen: str | None, follow_policy: str | None = None,
               reload_policy: Callable[[], Policy] | None = None,
               identity: PolicyIdentity | None = None, wait_for_map: bool = False) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with contextlib.AsyncExitStack() as stack:
        control: ControlThread | None = None
        if hasattr(source, "__aenter__"):
            entered = cast(AbstractAsyncContextManager[SnapshotSource], source)
            control = ControlThread("state-refresher", lambda: entered)
            source = await stack.enter_async_context(control)
        app = make_app(source)
        app.stats.state_registry = getattr(getattr(source, "metrics", None), "registry", None)
        swap = policy_swapper(app, source, control)
        app.stats.policy_served = lambda: identity  # the file's, until a stored version
        if follow_policy:
            follower = await stack.enter_async_context(policy_follower_thread(
                follow_policy, swap, loop, load=policy_gate.load_record, initial=identity))
            app.stats.policy_served = lambda: follower.served
            app.stats.policy_refused = lambda: follower.refused
        reloads: set[asyncio.Task[None]] = set()
        if reload_policy is not None:
            def on_hangup() -> None:
                task = asyncio.ensure_future(_reload(reload_policy, swap))
                reloads.add(task)
                task.add_done_callback(reloads.discard)

            loop.add_signal_handler(signal.SIGHUP, on_hangup)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})
        # one process: its port is taken or not before a wait for the map (a clear error
        # at once); a worker's own SO_REUSEPORT socket binds only once it answers, or the
        # kernel would hand it queries meanwhile
        bound = [bind_sockets(host, port, config.reuse_port)
                 for host, port in config.listen] if sockets is None else None
        if wait_for_map and app.map_ready is not None and not app.map_ready.is_set():
            log.info("answering once the GeoIP network map is built (--answer-before-map: "
                     "at once, on the slow path)")
            if not await loop.run_in_executor(None, app.map_ready.wait, MAP_WAIT):
                log.warning("no network map after %.0f s: answering without it", MAP_WAIT)
        server = DnsServer(app, config, sockets() if sockets is not None else bound)
        await server.start()
        settle_when_ready(app.map_ready)
        stack.push_async_callback(server.stop)
        if metrics_listen:
            host, port = serve_metrics(metrics_listen, app.stats.snapshot)
            print(f"metrics {host}:{port}", flush=True)
        if sockets is None:
            _announce(server.addresses)
        tasks = [asyncio.ensure_future(report(app.stats))] if report is not None else []
        await stop.wait()
        for task in tasks:
            task.cancel()
    return 0


def policy_swapper(app: DnsApp, source: SnapshotSource,
                   control: ControlThread | None) -> Callable[[Policy], Awaitable[None]]:
    """Answer from a new policy once its network maps are at hand (``DnsApp.prepare_maps``,
    off the loop, a build in a child process; the last policy answers meanwhile): the
    refresher follows its targets (on its control thread), the app its zone. A policy that
    a newer one overtakes while its maps are built is never swapped in."""
    newest = [0]
    pending: set[asyncio.Task[None]] = set()

    def apply(policy: Policy) -> None:
        if isinstance(source, SnapshotRefresher) and control is not None:
            control.call(source.set_policy, policy)  # a refresher always runs on one
        app.set_policy(policy)

    async def prepared(policy: Policy, number: int) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            await loop.run_in_executor(None, app.prepare_maps, policy)
        except Exception:
            if number == newest[0]:  # not a build a newer policy cancelled
                log.exception("GeoIP network map for the new policy failed; it answers "
                              "without, widening on demand")
        if number != newest[0]:
            return
        waited = loop.time() - started
        if waited > 1.0:
            log.info("the new policy answers after %.1f s spent on its network map; the "
                     "last one answered meanwhile", waited)
        apply(policy)

    def swap(policy: Policy) -> Awaitable[None]:
        newest[0] += 1
        task = asyncio.ensure_future(prepared(policy, newest[0]))
        pending.add(task)
        task.add_done_callback(pending.discard)
        return task

    return swap


async def _reload(reload_policy: Callable[[], Policy],
                  swap: Callable[[Policy], Awaitable[None]]) -> None:
    """SIGHUP: reload the policy file; one that fails to load leaves the last good one."""
    try:
        policy = await asyncio.to_thread(reload_policy)
    except PolicyError as exc:
        log.error("SIGHUP: the policy file does not load; still serving the last good one:\n%s",
                  exc.render())
        print("reload failed: still serving the last good policy", flush=True)
        return
    await swap(policy)
    print("reloaded the policy file", flush=True)


def _announce(addresses: list[tuple[str, int]]) -> None:
    shown = " ".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in addresses)
    print(f"listening {shown}", flush=True)


def redis_snapshots(redis_url: str, listen: str = "") -> SnapshotFactory:
    """A snapshot factory reading the shared state in Redis (one refresher per worker,
    each sending the heartbeat of its process: ``state.instances``)."""

    def factory(policy: Policy) -> SnapshotSource:
        return SnapshotRefresher(AsyncStateStore.from_url(redis_url), policy,
                                 heartbeat=this_process("dns", listen))

    return factory
