"""``director region serve``: the local balancer of one region, in front of its GPU servers."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

app = typer.Typer(help="Run a region's local balancer.", no_args_is_help=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def parse_listen(text: str, default_port: int) -> tuple[str, int]:
    """'127.0.1.1:8080', '[::1]:8080' or a bare host -> (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or "]" in port or (host.count(":") and not host.startswith("[")):
        host, port = text, str(default_port)
    host = host.strip("[]")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise typer.BadParameter(f"expected HOST:PORT, got '{text}'")
    return host, int(port)


@app.command()
def serve(
    policy: Annotated[Path, typer.Option("--policy", help="Policy file.")],
    region: Annotated[str, typer.Option("--region", help="Region whose balancer to run.")],
    listen: Annotated[str | None, typer.Option("--listen", help="HOST:PORT (default: the "
                                               "region's first endpoint, port 8080).")] = None,
    geoip: Annotated[Path | None, typer.Option("--geoip", help="MaxMind database for the "
                                               "residency re-check (default: GeoLite2 City "
                                               "2018).")] = None,
    trusted: Annotated[list[str] | None, typer.Option(
        "--trusted-network", help="Edge network whose X-Director-Client-IP / -Country headers "
        "are believed (repeatable; default: loopback).")] = None,
) -> None:
    """Serve the OpenAI-compatible API of REGION, routing to its GPU servers."""
    from director.geo import GeoDatabaseError, GeoLocator
    from policies import check_policy
    from regions.balancer import serve as serve_balancer
    from regions.balancer.residency_check import DEFAULT_TRUSTED, ResidencyCheck

    result = check_policy(str(policy))
    if result.policy is None:
        err.print(result.error().render(), markup=False)
        raise typer.Exit(1)
    try:
        spec = result.policy.region(region)
    except KeyError:
        names = ", ".join(result.policy.region_names)
        err.print(f"error: no region '{region}' in {policy} (regions: {names})", markup=False)
        raise typer.Exit(2) from None
    endpoints = [*spec.endpoints_v4, *spec.endpoints_v6]
    address = parse_listen(listen, 8080) if listen else (endpoints[0], 8080)

    try:
        locator = GeoLocator(str(geoip) if geoip else None)
    except GeoDatabaseError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from None

    def locate(address):
        location = locator.locate(address)
        return location.country, location.continent

    try:
        residency = ResidencyCheck(result.policy, region, locate, trusted or DEFAULT_TRUSTED)
    except ValueError as exc:
        err.print(f"error: --trusted-network: {exc}", markup=False)
        raise typer.Exit(2) from None

    def ready(balancer) -> None:
        err.print(f"region {region}: balancer on {balancer.url} in front of "
                  f"{len(spec.gpus)} GPU servers", markup=False)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_balancer(region, spec.gpus, address, spec.jurisdiction, ready=ready,
                                   residency=residency))
