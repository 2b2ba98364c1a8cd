"""``director region serve``: the local balancer of one region, in front of its GPU servers."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from director.console import plain_console
from regions.balancer.http.admin_listen import DEFAULT_ADMIN_PORT
from regions.balancer.scheduling.capacity import CapacityConfig
from regions.balancer.scheduling.registry import DEFAULT_PICKER, DEFAULT_SCORERS
from state.credentials import redacted
from state.ports import hostport, parse_hostport

if TYPE_CHECKING:
    from director.geo import IPAddress
    from policies.matching import Place
    from policies.model import Policy
    from regions.balancer import Balancer, BalancerConfig, SharedStateConfig
    from regions.balancer.http.admin_listen import AdminListen
    from regions.balancer.tenancy.residency_check import ResidencyCheck

DEFAULT_SCORERS_TEXT = " ".join(f"{name}={weight:g}" for name, weight in DEFAULT_SCORERS)

app = typer.Typer(help="Run a region's local balancer.", no_args_is_help=True)
err = plain_console(stderr=True)


def parse_listen(text: str, default_port: int) -> tuple[str, int]:
    """'127.0.1.1:8080', '[::1]:8080' or a bare host -> (host, port)."""
    try:
        return parse_hostport(text, default_port)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def parse_pairs(values: list[str] | None, option: str, what: str) -> list[tuple[str, str]]:
    """'NAME=VALUE' items -> pairs; a malformed one is a usage error naming the option."""
    pairs = []
    for item in values or ():
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise typer.BadParameter(f"expected {what}, got '{item}'", param_hint=option)
        pairs.append((name.strip(), value.strip()))
    return pairs


def parse_scorers(values: list[str] | None, known: list[str]) -> tuple[tuple[str, float], ...]:
    scorers = []
    for name, weight in parse_pairs(values, "--scorer", "NAME=WEIGHT"):
        if name not in known:
            raise typer.BadParameter(
                f"unknown scorer '{name}' (known: {', '.join(known)})", param_hint="--scorer"
            )
        try:
            scorers.append((name, float(weight)))
        except ValueError:
            raise typer.BadParameter(
                f"{name}: weight must be a number, got '{weight}'", param_hint="--scorer"
            ) from None
    return tuple(scorers)


@app.command()
def serve(
    policy: Annotated[Path, typer.Option("--policy", help="Policy file.")],
    region: Annotated[str, typer.Option("--region", help="Region whose balancer to run.")],
    listen: Annotated[
        str | None,
        typer.Option(
            "--listen", help="HOST:PORT (default: the region's first endpoint, port 8080)."
        ),
    ] = None,
    geoip: Annotated[
        Path | None,
        typer.Option(
            "--geoip",
            help="MaxMind database for the residency re-check (default: GeoLite2 City 2018).",
        ),
    ] = None,
    trusted: Annotated[
        list[str] | None,
        typer.Option(
            "--trusted-network",
            help="CIDR of an edge (a proxy in front of the balancer) whose "
            "X-Director-Client-IP / -Country headers are believed; repeatable. Default: "
            "none, every client is located by its own address. The edge must overwrite "
            "both headers.",
        ),
    ] = None,
    redis_url: Annotated[
        str | None,
        typer.Option(
            "--redis",
            help="Shared state (redis://HOST:PORT/DB): publish the region's load every "
            "second, follow GPU drains and probe health; serving goes on if it fails.",
        ),
    ] = None,
    state_prefix: Annotated[
        str,
        typer.Option("--state-prefix", help="Key prefix of the deployment in the shared state."),
    ] = "director",
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            envvar="DIRECTOR_BALANCER_STATE_DIR",
            help="Directory where the balancer keeps what must outlive a restart during a "
            "shared state outage: the tenant API key table (ids and SHA-256 digests, mode "
            "0600). Without it, a balancer started while the state is unreachable answers "
            "503 to API keys until the state is back.",
        ),
    ] = None,
    quota_wait: Annotated[
        float,
        typer.Option(
            "--quota-wait",
            min=0.01,
            envvar="DIRECTOR_QUOTA_WAIT",
            help="Seconds a request waits at least for the shared quota in Redis before the "
            "balancer decides it by its local limits (each balancer the whole quota); the "
            "wait grows with measured round trips, up to 2 s or this. Raise it where Redis "
            "answers slowly now and then, to keep a tenant within its quota.",
        ),
    ] = 0.25,
    admin_listen: Annotated[
        str | None,
        typer.Option(
            "--admin-listen",
            help="HOST:PORT of the admin listener (/metrics, /_admin/*), apart from the "
            "public port (default: the --listen host if it is a loopback address, else "
            f"127.0.0.1; port {DEFAULT_ADMIN_PORT}). Off loopback it needs "
            "--admin-token-file.",
        ),
    ] = None,
    admin_token_file: Annotated[
        Path | None,
        typer.Option(
            "--admin-token-file",
            help="File holding the bearer token the admin listener requires (on its first "
            "line); required when --admin-listen is not a loopback address.",
        ),
    ] = None,
    follow_policy: Annotated[
        bool,
        typer.Option(
            "--follow-policy",
            help="Follow the policy stored in Redis (set by `director up` or "
            "PUT /api/v1/policy): the region's GPU servers, residency rules and tenants "
            "change live. The default with --redis.",
        ),
    ] = False,
    no_follow_policy: Annotated[
        bool,
        typer.Option(
            "--no-follow-policy",
            help="Serve the policy file only, even with --redis (tests, special cases).",
        ),
    ] = False,
    overflow: Annotated[
        str,
        typer.Option(
            "--overflow",
            help="When saturated: off (429), redirect (307) or proxy to the "
            "nearest sibling region the client may use.",
        ),
    ] = "off",
    sibling: Annotated[
        list[str] | None,
        typer.Option(
            "--sibling",
            help="REGION=URL of a sibling balancer (repeatable; default: the "
            "region's first endpoint and --balancer-port).",
        ),
    ] = None,
    balancer_port: Annotated[
        int | None,
        typer.Option(
            "--balancer-port", help="Port of the sibling balancers (default: this one's)."
        ),
    ] = None,
    scorer: Annotated[
        list[str] | None,
        typer.Option(
            "--scorer",
            help="NAME=WEIGHT, repeatable: the scheduling profile's scorers "
            f"(default: {DEFAULT_SCORERS_TEXT}).",
        ),
    ] = None,
    picker: Annotated[
        str | None,
        typer.Option("--picker", help=f"The profile's picker (default: {DEFAULT_PICKER})."),
    ] = None,
    late_binding: Annotated[
        bool,
        typer.Option(
            "--late-binding",
            help="Hold requests in the region queue once every GPU server runs its learned "
            "capacity (off by default: each held request waits an engine iteration; a "
            "policy's max-seqs always holds).",
        ),
    ] = False,
    ttft_eject: Annotated[
        float,
        typer.Option(
            "--ttft-eject",
            min=0.0,
            help="Eject a GPU server whose TTFT average is above FACTOR times the others' "
            "median (a gray failure detector; 0, the default: off, as bursts of long "
            "prompts trip it on healthy fleets).",
        ),
    ] = 0.0,
    provisional_growth: Annotated[
        float,
        typer.Option(
            "--provisional-growth",
            min=0.0,
            help="In a region with tenants, a GPU server not yet seen saturated may run "
            "FACTOR times the most it was seen running, doubling while it runs all it is "
            "given (0: unbounded until saturated; --late-binding alone does not use it).",
        ),
    ] = CapacityConfig.provisional_growth,
) -> None:
    """Serve the OpenAI-compatible API of REGION, routing to its GPU servers."""
    import uvloop

    from director import policy_gate
    from regions.balancer import SharedStateConfig
    from regions.balancer import serve as serve_balancer
    from regions.balancer.signals.overflow import OverflowConfig, OverflowMode
    from regions.balancer.signals.policy_follow import FollowPolicy

    if follow_policy and no_follow_policy:
        _usage("--follow-policy and --no-follow-policy contradict each other")
    if follow_policy and not redis_url:
        _usage("--follow-policy needs --redis")
    following = bool(redis_url) and not no_follow_policy
    try:
        mode = OverflowMode(overflow)
    except ValueError:
        raise typer.BadParameter(
            f"expected off, redirect or proxy, got '{overflow}'", param_hint="--overflow"
        ) from None
    siblings = dict(parse_pairs(sibling, "--sibling", "REGION=URL"))
    config = balancer_config(scorer, picker, late_binding, ttft_eject, provisional_growth)

    acceptance = policy_gate.accept(str(policy))
    if acceptance.policy is None:
        err.print(acceptance.error().render(), markup=False)
        raise typer.Exit(1)
    accepted = acceptance.policy
    try:
        spec = accepted.region(region)
    except KeyError:
        _usage(f"no region '{region}' in {policy} (regions: {', '.join(accepted.region_names)})")
    endpoints = [*spec.endpoints_v4, *spec.endpoints_v6]
    address = parse_listen(listen, 8080) if listen else (endpoints[0], 8080)
    admin = admin_listener(admin_listen, admin_token_file, address[0])
    residency = residency_check(accepted, region, geoip, trusted)
    shared = shared_state(redis_url, state_prefix, accepted.stale_after, state_dir, quota_wait)
    overflow_config = None
    if mode is not OverflowMode.OFF:
        overflow_config = OverflowConfig(mode, balancer_port or address[1] or None, siblings)

    def ready(balancer: Balancer) -> None:
        state = f", shared state {redacted(redis_url)}" if redis_url else ""
        if following:
            state += ", following the stored policy"
        if shared is not None and shared.quota_wait_s != SharedStateConfig.quota_wait_s:
            state += f", waiting {shared.quota_wait_s:g} s or more for shared quotas"
        if balancer.overflow is not None:
            names = ", ".join(s.region for s in balancer.overflow.siblings) or "none"
            state += f", overflow {mode.value} to {names}"
        err.print(
            f"region {region}: balancer on {balancer.url} in front of "
            f"{len(spec.gpus)} GPU servers{state}; admin on {balancer.admin_url}",
            markup=False,
        )

    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(
            serve_balancer(
                region,
                spec.gpus,
                address,
                spec.jurisdiction,
                ready=ready,
                residency=residency,
                shared_state=shared,
                capacity_rps=spec.capacity.rps,
                config=config,
                overflow=overflow_config,
                follow_policy=FollowPolicy(shared if following else None,
                                           policy_gate.load_record, acceptance.identity()),
                policy=accepted,
                admin=admin,
            )
        )


def balancer_config(
    scorer: list[str] | None, picker: str | None, late_binding: bool, ttft_eject: float,
    provisional_growth: float = CapacityConfig.provisional_growth,
) -> BalancerConfig:
    """The balancer's configuration from the command line's routing options."""
    from regions.balancer import BalancerConfig
    from regions.balancer.scheduling.registry import Registry, register_builtin_plugins
    from routing import Kind

    registry = register_builtin_plugins(Registry())
    config = BalancerConfig()
    if scorer:
        config = dataclasses.replace(
            config, scorers=parse_scorers(scorer, registry.names(Kind.SCORER))
        )
    if picker:
        if picker not in registry.names(Kind.PICKER):
            known = ", ".join(registry.names(Kind.PICKER))
            raise typer.BadParameter(
                f"unknown picker '{picker}' (known: {known})", param_hint="--picker"
            )
        config = dataclasses.replace(config, picker=picker)
    if late_binding:
        config = dataclasses.replace(
            config, capacity=dataclasses.replace(config.capacity, late_binding=True)
        )
    if provisional_growth != config.capacity.provisional_growth:
        config = dataclasses.replace(config, capacity=dataclasses.replace(
            config.capacity, provisional_growth=provisional_growth))
    if ttft_eject:
        config = dataclasses.replace(
            config, outliers=dataclasses.replace(config.outliers, ttft_factor=ttft_eject)
        )
    return config


def admin_listener(listen: str | None, token_file: Path | None, public_host: str
                   ) -> AdminListen:
    """Where the admin listener binds and its token; off loopback without a token is a
    usage error (the balancer does not start). Without ``listen``: ``public_host`` when it
    is loopback (balancers on 127.0.1.1, 127.0.2.1 ... each get their own), else 127.0.0.1."""
    from regions.balancer.errors import BalancerConfigError
    from regions.balancer.http.admin_listen import AdminListen, read_token_file
    from state.ports import is_loopback

    if listen is None:
        listen = hostport((public_host if is_loopback(public_host) else "127.0.0.1",
                           DEFAULT_ADMIN_PORT))
    host, port = parse_listen(listen, DEFAULT_ADMIN_PORT)
    try:
        token = read_token_file(token_file) if token_file is not None else None
        return AdminListen(host, port, token)
    except BalancerConfigError as exc:
        _usage(f"--admin-listen {listen}: {exc}")


def residency_check(
    policy: Policy, region: str, geoip: Path | None, trusted: list[str] | None
) -> ResidencyCheck:
    """The region's residency re-check: client location from the GeoIP database, or from
    the headers of an edge in ``trusted`` (none by default)."""
    from director.geo import GeoDatabaseError, GeoLocator
    from regions.balancer.tenancy.residency_check import ResidencyCheck

    try:
        locator = GeoLocator(str(geoip) if geoip else None)
    except GeoDatabaseError as exc:
        _usage(str(exc))

    def locate(address: IPAddress) -> Place:
        return locator.locate(address).place

    try:
        return ResidencyCheck(policy, region, locate, trusted or ())
    except ValueError as exc:
        _usage(f"--trusted-network: {exc}")


def shared_state(
    redis_url: str | None, prefix: str, stale_after: float, state_dir: Path | None = None,
    quota_wait_s: float = 0.25,
) -> SharedStateConfig | None:
    """Where the shared state is (None: the balancer runs without one), and where the
    balancer keeps its copy of the tenant key table (``state_dir``)."""
    from regions.balancer import SharedStateConfig
    from tenants.key_table_file import KEY_TABLE_FILE

    if not redis_url:
        return None
    if not redis_url.startswith(("redis://", "rediss://", "unix://")):
        _usage(f"--redis: expected redis://HOST:PORT/DB, got '{redacted(redis_url)}'")
    key_table = state_dir / KEY_TABLE_FILE if state_dir is not None else None
    return SharedStateConfig(redis_url, prefix=prefix, stale_after_s=stale_after,
                             key_table_file=key_table, quota_wait_s=quota_wait_s)


def _usage(message: str) -> NoReturn:
    err.print(f"error: {message}", markup=False)
    raise typer.Exit(2)
