"""``director region serve``: the local balancer of one region, in front of its GPU servers."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from director.commands import region_options as opt
from director.console import plain_console
from regions.balancer.http.admin_listen import DEFAULT_ADMIN_PORT
from regions.balancer.scheduling.capacity import CapacityConfig
from state.credentials import redacted
from state.ports import hostport, parse_hostport
from tenants.quota_link import DEFAULT_TIMEOUT_S

if TYPE_CHECKING:
    from director.geo import IPAddress
    from policies.matching import Place
    from policies.model import GpuServer, Policy
    from regions.balancer import Balancer, BalancerConfig, SharedStateConfig
    from regions.balancer.http.admin_listen import AdminListen
    from regions.balancer.tenancy.residency_check import ResidencyCheck


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
    policy: opt.PolicyOption,
    region: opt.RegionOption,
    listen: opt.ListenOption = None,
    geoip: opt.GeoipOption = None,
    trusted: opt.TrustedOption = None,
    redis_url: opt.RedisUrlOption = None,
    state_prefix: opt.StatePrefixOption = "director",
    state_dir: opt.StateDirOption = None,
    quota_wait: opt.QuotaWaitOption = DEFAULT_TIMEOUT_S,
    admin_listen: opt.AdminListenOption = None,
    admin_token_file: opt.AdminTokenFileOption = None,
    follow_policy: opt.FollowPolicyOption = False,
    no_follow_policy: opt.NoFollowPolicyOption = False,
    overflow: opt.OverflowOption = "off",
    sibling: opt.SiblingOption = None,
    balancer_port: opt.BalancerPortOption = None,
    scorer: opt.ScorerOption = None,
    picker: opt.PickerOption = None,
    late_binding: opt.LateBindingOption = False,
    ttft_eject: opt.TtftEjectOption = 0.0,
    provisional_growth: opt.ProvisionalGrowthOption = CapacityConfig.provisional_growth,
    hedge: opt.HedgeOption = 0.0,
) -> None:
    """Serve the OpenAI-compatible API of REGION, routing to its GPU servers."""
    options = RegionOptions(policy, region, listen, geoip, trusted, redis_url, state_prefix,
                            state_dir, quota_wait, admin_listen, admin_token_file,
                            follow_policy, no_follow_policy, overflow, sibling, balancer_port,
                            scorer, picker, late_binding, ttft_eject, provisional_growth,
                            hedge)
    run_balancer(*balancer_setup(options))


@dataclasses.dataclass(frozen=True)
class RegionOptions:
    """What ``director region serve`` was given (see ``region_options`` for each)."""

    policy: Any
    region: Any
    listen: Any
    geoip: Any
    trusted: Any
    redis_url: Any
    state_prefix: Any
    state_dir: Any
    quota_wait: Any
    admin_listen: Any
    admin_token_file: Any
    follow_policy: Any
    no_follow_policy: Any
    overflow: Any
    sibling: Any
    balancer_port: Any
    scorer: Any
    picker: Any
    late_binding: Any
    ttft_eject: Any
    provisional_growth: Any
    hedge: Any = 0.0


def balancer_setup(
    options: RegionOptions,
) -> tuple[str, tuple[GpuServer, ...], BalancerConfig, Callable[[Balancer], None]]:
    """The region, its GPU servers, the balancer's configuration (from the policy and the
    command line) and what to print once it listens; a usage error exits."""
    from director import policy_gate
    from regions.balancer.adapters.placement import adapters_of
    from regions.balancer.config import SERVED_PORT
    from regions.balancer.scheduling.revision_split import RevisionSplit
    from regions.balancer.signals.overflow import OverflowConfig, OverflowMode
    from regions.balancer.signals.policy_follow import FollowPolicy

    o = options
    if o.follow_policy and o.no_follow_policy:
        _usage("--follow-policy and --no-follow-policy contradict each other")
    if o.follow_policy and not o.redis_url:
        _usage("--follow-policy needs --redis")
    following = bool(o.redis_url) and not o.no_follow_policy
    try:
        mode = OverflowMode(o.overflow)
    except ValueError:
        raise typer.BadParameter(
            f"expected off, redirect or proxy, got '{o.overflow}'", param_hint="--overflow"
        ) from None
    siblings = dict(parse_pairs(o.sibling, "--sibling", "REGION=URL"))
    config = balancer_config(o.scorer, o.picker, o.late_binding, o.ttft_eject,
                             o.provisional_growth, o.hedge)
    acceptance = policy_gate.accept(str(o.policy))
    if acceptance.policy is None:
        err.print(acceptance.error().render(), markup=False)
        raise typer.Exit(1)
    accepted = acceptance.policy
    try:
        spec = accepted.region(o.region)
    except KeyError:
        _usage(f"no region '{o.region}' in {o.policy} "
               f"(regions: {', '.join(accepted.region_names)})")
    endpoints = [*spec.endpoints_v4, *spec.endpoints_v6]
    address = parse_listen(o.listen, SERVED_PORT) if o.listen else (endpoints[0], SERVED_PORT)
    shared = shared_state(o.redis_url, o.state_prefix, accepted.stale_after, o.state_dir,
                          o.quota_wait)
    if shared is not None:
        shared = dataclasses.replace(shared, listen=hostport(address))
    config = dataclasses.replace(
        config, listen=address, jurisdiction=spec.jurisdiction, policy=accepted,
        residency=residency_check(accepted, o.region, o.geoip, o.trusted),
        shared_state=shared, capacity_rps=spec.capacity.rps,
        overflow=None if mode is OverflowMode.OFF else OverflowConfig(
            mode, o.balancer_port or address[1] or None, siblings),
        follow_policy=FollowPolicy(shared if following else None, policy_gate.load_record,
                                   acceptance.identity()),
        admin=admin_listener(o.admin_listen, o.admin_token_file, address[0]),
        splits=tuple(RevisionSplit(model, weights) for model, weights in spec.splits),
        adapters=adapters_of(spec))
    return o.region, spec.gpus, config, ready_message(o.region, len(spec.gpus), config,
                                                      following)


def ready_message(region: str, gpus: int, config: BalancerConfig,
                  following: bool) -> Callable[[Balancer], None]:
    """What the balancer prints once it listens: where, in front of what, following what."""
    from regions.balancer import SharedStateConfig

    shared = config.shared_state

    def ready(balancer: Balancer) -> None:
        state = f", shared state {redacted(shared.url)}" if shared is not None else ""
        if following:
            state += ", following the stored policy"
        if shared is not None and shared.quota_wait_s != SharedStateConfig.quota_wait_s:
            state += f", waiting {shared.quota_wait_s:g} s or more for shared quotas"
        if balancer.overflow is not None:
            names = ", ".join(s.region for s in balancer.overflow.siblings) or "none"
            state += f", overflow {balancer.overflow.config.mode.value} to {names}"
        err.print(f"region {region}: balancer on {balancer.url} in front of {gpus} GPU "
                  f"servers{state}; admin on {balancer.admin_url}", markup=False)

    return ready


def run_balancer(region: str, gpus: tuple[GpuServer, ...], config: BalancerConfig,
                 ready: Callable[[Balancer], None]) -> None:
    """Serve until interrupted, logging to stderr."""
    import uvloop

    from regions.balancer import serve as serve_balancer
    from telemetry.otel import TracingConfigError, tracing_from_env

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        tracing = tracing_from_env("director-balancer", "director.balancer")
    except TracingConfigError as exc:
        err.print(f"error: tracing: {exc}", markup=False)
        raise typer.Exit(2) from None
    if tracing is not None:
        config = dataclasses.replace(config, tracer=tracing.tracer)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            uvloop.run(serve_balancer(region, gpus, config, ready=ready))
    finally:
        if tracing is not None:
            tracing.shutdown()


def balancer_config(
    scorer: list[str] | None, picker: str | None, late_binding: bool, ttft_eject: float,
    provisional_growth: float = CapacityConfig.provisional_growth, hedge: float = 0.0,
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
    if hedge:
        config = dataclasses.replace(config, hedge=dataclasses.replace(config.hedge,
                                                                       share=hedge))
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
    quota_wait_s: float = DEFAULT_TIMEOUT_S,
) -> SharedStateConfig | None:
    """Where the shared state is (None: the balancer runs without one), and where the
    balancer keeps its copy of the tenant key table (``state_dir``)."""
    from regions.balancer import SharedStateConfig
    from tenants.key_table_file import KEY_TABLE_FILE

    if not redis_url:
        return None
    if not redis_url.startswith(("redis://", "rediss://", "unix://", "redis+sentinel://")):
        _usage(f"--redis: expected redis://HOST:PORT/DB or redis+sentinel://HOST:PORT[,...]/"
               f"MASTER/DB, got '{redacted(redis_url)}'")
    key_table = state_dir / KEY_TABLE_FILE if state_dir is not None else None
    return SharedStateConfig(redis_url, prefix=prefix, stale_after_s=stale_after,
                             key_table_file=key_table, quota_wait_s=quota_wait_s)


def _usage(message: str) -> NoReturn:
    err.print(f"error: {message}", markup=False)
    raise typer.Exit(2)
