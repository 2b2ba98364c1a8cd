"""``director dns serve``: the authoritative GeoDNS server for a policy's zone."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from director.console import plain_console

app = typer.Typer(help="Run the authoritative GeoDNS server.", no_args_is_help=True)
err = plain_console(stderr=True)


@app.command()
def serve(
    policy: Annotated[Path, typer.Option("--policy", help="Policy file whose zone to serve.")],
    listen: Annotated[str, typer.Option(help="ADDR:PORT[,ADDR:PORT...]; IPv6 as [::1]:53.")]
    = "127.0.0.1:5353",
    geoip: Annotated[Path | None, typer.Option(help="MaxMind database (default: GeoLite2 "
                                               "City 2018).")] = None,
    workers: Annotated[int, typer.Option(help="Processes sharing the port "
                                         "(SO_REUSEPORT).")] = 1,
    metrics: Annotated[str | None, typer.Option(help="ADDR:PORT for Prometheus "
                                                "metrics.")] = None,
    rrl: Annotated[str | None, typer.Option(help="Response rate limiting: off, log-only or "
                                            "enforce (default: log-only when every --listen "
                                            "address is loopback, else enforce; see "
                                            "docs/dns-rate-limiting.md).")] = None,
    rrl_rate: Annotated[float, typer.Option(help="Responses per second per client /24 or "
                                            "/56 before RRL limits it.")] = 20.0,
    rrl_slip: Annotated[int, typer.Option(help="Every Nth limited query gets a truncated "
                                          "reply (retry over TCP); 0: none.")] = 2,
    tcp_idle_timeout: Annotated[float, typer.Option(help="Close a TCP connection that "
                                                    "completes no query this many "
                                                    "seconds.")] = 10.0,
    tcp_max_connections: Annotated[int, typer.Option(help="TCP connections open at once "
                                                     "(per worker).")] = 1024,
    tcp_max_per_network: Annotated[int, typer.Option(help="TCP connections open at once from "
                                                     "one client /24 or /56 (per "
                                                     "worker).")] = 16,
    redis_url: Annotated[str | None, typer.Option("--redis", help="Shared state (health, "
                                                  "load, latency) in Redis; without it every "
                                                  "region counts as healthy.")] = None,
    follow_policy: Annotated[bool, typer.Option(help="Follow the policy stored in Redis (set "
                                                "by `director up` or PUT /api/v1/policy) "
                                                "instead of only the file.")] = False,
    precompile: Annotated[bool, typer.Option(help="Merge the GeoIP database's IPv4 space "
                                             "ahead of time (each worker, at start, before "
                                             "it answers; kept in --map-cache), so "
                                             "never-seen client subnets cost a binary "
                                             "search.")] = True,
    udp_reader_threads: Annotated[bool, typer.Option(help="Read UDP on a thread per socket: "
                                                     "faster cache hits, slower on "
                                                     "never-seen client subnets.")] = False,
    dnssec_keys: Annotated[Path | None, typer.Option(help="Sign answers with the zone's keys "
                                                     "in this directory (director dnssec "
                                                     "keygen; docs/dnssec.md).")] = None,
    answer_before_map: Annotated[bool, typer.Option(help="With --precompile, answer while "
                                                    "the network map is built (slowly for "
                                                    "never-seen subnets) instead of only "
                                                    "once it is there.")] = False,
    map_cache: Annotated[str, typer.Option(help="Folder where built network maps are kept, "
                                           "so a restart answers at full speed at once "
                                           "(default: ~/.cache/director/network-maps; "
                                           "'none': keep none).")] = "",
    dnssec_presigned: Annotated[bool, typer.Option(help="Sign answers with the signatures "
                                                   "`director dnssec presign` publishes in "
                                                   "--redis: this server holds no key.")]
    = False,
) -> None:
    """Answer the policy's zone: A/AAAA per client by residency, health, load and distance."""
    from director.dns.cli import redis_snapshots
    from director.dns.cli import serve as serve_dns
    from director.dnssec.signer import NoKeys
    from director.geo import GeoDatabaseError
    from policies import PolicyError

    if dnssec_presigned and (not redis_url or dnssec_keys):
        err.print("error: --dnssec-presigned needs --redis and no --dnssec-keys", markup=False)
        raise typer.Exit(2)
    if follow_policy and not redis_url:
        err.print("error: --follow-policy needs --redis", markup=False)
        raise typer.Exit(2)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    factory = redis_snapshots(redis_url, listen) if redis_url else None
    try:
        status = serve_dns(str(policy), listen, str(geoip) if geoip else None, workers,
                           metrics, rrl, rrl_rate=rrl_rate, rrl_slip=rrl_slip,
                           tcp_idle_timeout=tcp_idle_timeout,
                           tcp_max_connections=tcp_max_connections,
                           tcp_max_per_network=tcp_max_per_network, snapshot_factory=factory,
                           follow_policy=redis_url if follow_policy else None,
                           precompile=precompile, udp_reader_threads=udp_reader_threads,
                           dnssec_keys=str(dnssec_keys) if dnssec_keys else None,
                           dnssec_presigned=redis_url if dnssec_presigned else None,
                           map_cache=None if map_cache == "none" else map_cache,
                           answer_before_map=answer_before_map)
    except PolicyError as exc:
        err.print(exc.render(), markup=False)
        raise typer.Exit(1) from None
    except (GeoDatabaseError, ValueError, OSError, NoKeys) as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from None
    raise typer.Exit(status)
