"""``director up``: the whole system on one machine (see :mod:`director.up`)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Annotated

import typer

from director.commands.region import parse_listen
from director.console import plain_console

DEFAULT_POLICY = Path(__file__).resolve().parents[2] / "policies" / "examples" / "global.dp"
HA_POLICY = DEFAULT_POLICY.with_name("ha.dp")
err = plain_console(stderr=True)


def up(
    policy: Annotated[Path | None, typer.Option("--policy", help="Policy file (default: the "
                                                "example policy; with --ha, its HA example)."
                                                )] = None,
    ha: Annotated[bool, typer.Option("--ha", help="Replicate every tier: the state on three "
                                     "servers with Sentinels (embedded only), two DNS "
                                     "servers, two admin APIs, two probe workers, a balancer "
                                     "on every endpoint of a region.")] = False,
    dnssec: Annotated[bool, typer.Option("--dnssec", help="Sign the zone (a CSK made in the "
                                         "run directory on first use; with --ha the DNS "
                                         "servers hold no key: docs/dnssec.md).")] = False,
    simulate: Annotated[bool, typer.Option("--simulate", help="Run simulated GPU servers at "
                                           "the policy's GPU addresses.")] = False,
    redis_url: Annotated[str | None, typer.Option("--redis", help="Redis URL (default: an "
                                                  "embedded Valkey on loopback).")] = None,
    dns: Annotated[str, typer.Option("--dns", help="DNS ADDR:PORT (UDP and TCP).")]
    = "127.0.0.1:5353",
    api: Annotated[str, typer.Option("--api", help="Admin API ADDR:PORT.")] = "127.0.0.1:8080",
    dns_metrics: Annotated[str, typer.Option("--dns-metrics", help="ADDR:PORT of the DNS "
                                             "server's Prometheus metrics.")]
    = "127.0.0.1:9153",
    balancer_port: Annotated[int, typer.Option(help="Port of every regional balancer, on "
                                               "its region's address.")] = 8080,
    balancer_admin_port: Annotated[int, typer.Option(help="Port of every balancer's admin "
                                                     "listener (/metrics, /_admin/*), on its "
                                                     "region's loopback address.")] = 9180,
    run_dir: Annotated[Path | None, typer.Option("--run-dir", help="Logs, tokens, control "
                                                 "socket (default /tmp/director-UID).")] = None,
    time_scale: Annotated[float, typer.Option(help="Simulated model seconds per wall "
                                              "second.")] = 1.0,
    geoip: Annotated[Path | None, typer.Option(help="MaxMind database (default: GeoLite2 "
                                               "City 2018).")] = None,
    dns_precompile: Annotated[bool, typer.Option(help="Let the DNS server merge the GeoIP "
                                                 "database's address space ahead of time "
                                                 "(a core busy for a while after start).")]
    = True,
    unsafe_skip_residency_proof: Annotated[bool, typer.Option(
        "--unsafe-skip-residency-proof", hidden=True,
        help="TEST ONLY: load the policy without the residency proof, so drills can show "
             "the runtime checks catching a leaky policy.")] = False,
) -> None:
    """Run DNS, admin API, one balancer per region, probe workers with beat, Valkey (unless
    --redis) and, with --simulate, the GPU servers: supervised, restarted when they die,
    stopped together on Ctrl-C. With --ha, two or more of each on loopback addresses."""
    from director.policy_gate import accept
    from director.up import rundir
    from director.up.plan import UpOptions
    from director.up.run import UpError, run_up
    from policies.loader import UNSAFE_SKIP_PROOF_ENV

    if unsafe_skip_residency_proof:
        os.environ[UNSAFE_SKIP_PROOF_ENV] = "1"  # inherited by every child
        err.print("WARNING: residency proof disabled (test only)", markup=False)
    if ha and redis_url is not None:
        err.print("--ha runs its own replicated state; give --redis without --ha (a "
                  "redis+sentinel:// URL names a Sentinel set)", markup=False)
        raise typer.Exit(2)
    policy = policy or (HA_POLICY if ha else DEFAULT_POLICY)
    acceptance = accept(str(policy))
    if acceptance.policy is None:
        err.print(acceptance.error().render(), markup=False)
        raise typer.Exit(1)
    options = UpOptions(
        policy_path=policy.resolve(), run_dir=(run_dir or rundir.default_run_dir()).resolve(),
        redis_url=redis_url or "", simulate=simulate, dns=parse_listen(dns, 5353),
        api=parse_listen(api, 8080), dns_metrics=parse_listen(dns_metrics, 9153),
        balancer_port=balancer_port, balancer_admin_port=balancer_admin_port,
        time_scale=time_scale, dns_precompile=dns_precompile,
        geoip=geoip.resolve() if geoip else None, ha=ha, dnssec=dnssec)
    if dnssec:
        _make_keys(acceptance.policy.zone.apex, options.dnssec_keys)
    try:
        status = asyncio.run(run_up(acceptance.policy, acceptance.sources(), options,
                                    plain_console(soft_wrap=False), embedded=redis_url is None,
                                    proofs=acceptance.proofs))
    except UpError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(1) from None
    raise typer.Exit(status)


def _make_keys(zone: str, keys: Path) -> None:
    """The zone's first CSK in ``keys`` unless it holds keys of the zone already."""
    import time

    from director.dnssec.key_directory import load_keys, save_keys
    from director.dnssec.keys import Role, generate

    if not load_keys(keys, zone):
        save_keys(keys, [generate(zone, Role.CSK, time.time())])
