"""``director dnssec``: the zone's keys: create, list, roll, and the DS for the parent."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from director.console import plain_console

if TYPE_CHECKING:
    from director.dnssec.keys import ZoneKey
    from policies.model import Policy

app = typer.Typer(help="DNSSEC keys of the policy's zone (docs/dnssec.md).",
                  no_args_is_help=True)
err = plain_console(stderr=True)

PolicyOption = Annotated[Path, typer.Option("--policy", help="The policy file whose zone.")]
KeysOption = Annotated[Path, typer.Option("--keys", help="The key directory (what `director "
                                          "dns serve --dnssec-keys` reads).")]
PropagationOption = Annotated[float, typer.Option(help="Seconds for a change to reach every "
                                                  "DNS server of the zone.")]
ParentTtlOption = Annotated[float, typer.Option(help="The parent zone's DS TTL, seconds.")]


def _policy(path: Path) -> Policy:
    from director import policy_gate

    acceptance = policy_gate.accept(str(path))
    if acceptance.policy is None:
        err.print(acceptance.error().render(), markup=False)
        raise typer.Exit(1)
    return acceptance.policy


def _load(keys: Path, policy: Policy) -> list[ZoneKey]:
    from director.dnssec.key_directory import load_keys

    return load_keys(keys, policy.zone.apex)


@app.command()
def keygen(
    policy: PolicyOption, keys: KeysOption,
    split: Annotated[bool, typer.Option(help="A KSK and a ZSK instead of one combined "
                                        "signing key (CSK).")] = False,
    algorithm: Annotated[str, typer.Option(help="ecdsap256sha256 or ed25519.")]
    = "ecdsap256sha256",
) -> None:
    """Create the zone's first keys, published and signing now."""
    from director.dnssec.key_directory import save_keys
    from director.dnssec.keys import ALGORITHMS, Role, generate

    zone = _policy(policy).zone.apex
    if algorithm not in ALGORITHMS:
        err.print(f"error: unknown algorithm {algorithm!r} ({', '.join(ALGORITHMS)})",
                  markup=False)
        raise typer.Exit(2)
    if _load(keys, _policy(policy)):
        err.print(f"error: {keys} already holds keys of {zone}; use `director dnssec "
                  "rollover` to replace them", markup=False)
        raise typer.Exit(1)
    now = time.time()
    roles = (Role.KSK, Role.ZSK) if split else (Role.CSK,)
    made = [generate(zone, role, now, algorithm=ALGORITHMS[algorithm]) for role in roles]
    save_keys(keys, made)
    for key in made:
        typer.echo(f"{key.role.value} {key.tag} created")
    for key in made:
        if key.role.signs_keys:
            typer.echo(key.ds_text())


@app.command()
def status(policy: PolicyOption, keys: KeysOption) -> None:
    """Every key with its role, state and timings; what the parent should hold."""
    from director.dnssec.timeline import published, signing, state_at

    found = _load(keys, _policy(policy))
    if not found:
        err.print(f"no keys of the zone in {keys}", markup=False)
        raise typer.Exit(1)
    now = time.time()
    state = state_at(found, now)
    for key in sorted(found, key=lambda k: k.created):
        doing = ("signing" if signing(key, now) else "published" if published(key, now)
                 else "removed" if key.remove is not None and key.remove <= now else "pending")
        times = " ".join(f"{name}={_when(getattr(key, name))}" for name in
                         ("publish", "activate", "retire", "remove", "ds_seen")
                         if getattr(key, name) is not None)
        typer.echo(f"{key.role.value} {key.tag:5d} alg {key.algorithm} {doing:9s} {times}")
    typer.echo("parent should hold DS for: "
               + (", ".join(str(k.tag) for k in state.for_parent) or "nothing"))


@app.command()
def ds(policy: PolicyOption, keys: KeysOption) -> None:
    """The DS records to put at the parent (the keys CDS lists now)."""
    from director.dnssec.timeline import state_at

    for key in state_at(_load(keys, _policy(policy)), time.time()).for_parent:
        typer.echo(key.ds_text())


@app.command()
def rollover(
    policy: PolicyOption, keys: KeysOption,
    role: Annotated[str, typer.Option(help="csk, ksk or zsk.")] = "csk",
    propagation: PropagationOption = 300.0, parent_ds_ttl: ParentTtlOption = 86400.0,
) -> None:
    """Start a rollover of the live key of ROLE (timings: docs/dnssec.md)."""
    from director.dnssec.key_directory import save_keys
    from director.dnssec.keys import Role
    from director.dnssec.timeline import start_rollover
    from director.dnssec.zone_ttls import policy_ttls

    loaded = _policy(policy)
    ttls = policy_ttls(loaded, propagation=propagation, parent_ds=parent_ds_ttl)
    try:
        rolled = start_rollover(_load(keys, loaded), Role(role), time.time(), ttls)
    except ValueError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(1) from None
    save_keys(keys, rolled)
    new = max(rolled, key=lambda k: k.created)
    typer.echo(f"{new.role.value} {new.tag} created, published now"
               + (f", signing at {_when(new.activate)}" if Role(role) is Role.ZSK else
                  ", signing now beside the old key; put its DS at the parent, then run "
                  f"`director dnssec confirm-ds {new.tag}`"))
    if new.role.signs_keys:
        typer.echo(new.ds_text())


@app.command("confirm-ds")
def confirm_ds(
    tag: Annotated[int, typer.Argument(help="The new key's tag.")],
    policy: PolicyOption, keys: KeysOption,
    propagation: PropagationOption = 300.0, parent_ds_ttl: ParentTtlOption = 86400.0,
) -> None:
    """Record that the parent now holds key TAG's DS: the old key retires after the
    parent's DS TTL and is removed later."""
    from director.dnssec.key_directory import save_keys
    from director.dnssec.timeline import confirm_ds as confirm
    from director.dnssec.zone_ttls import policy_ttls

    loaded = _policy(policy)
    ttls = policy_ttls(loaded, propagation=propagation, parent_ds=parent_ds_ttl)
    try:
        updated = confirm(_load(keys, loaded), tag, time.time(), ttls)
    except ValueError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(1) from None
    save_keys(keys, updated)
    for key in updated:
        if key.retire is not None and key.tag != tag and key.ds_seen is None:
            typer.echo(f"{key.role.value} {key.tag} retires at {_when(key.retire)}, "
                       f"removed at {_when(key.remove)}")


@app.command()
def maintain(
    policy: PolicyOption, keys: KeysOption,
    zsk_lifetime: Annotated[float, typer.Option(help="Days a ZSK signs before it is "
                                                "rolled.")] = 30.0,
    ksk_lifetime: Annotated[float, typer.Option(help="Days a CSK or KSK signs before its "
                                                "rollover starts (0: never).")] = 0.0,
    propagation: PropagationOption = 300.0, parent_ds_ttl: ParentTtlOption = 86400.0,
) -> None:
    """Start the rollovers that are due (run it daily: cron, a systemd timer)."""
    from director.dnssec.key_directory import save_keys
    from director.dnssec.keys import Role
    from director.dnssec.timeline import due_rollovers, start_rollover
    from director.dnssec.zone_ttls import policy_ttls

    loaded = _policy(policy)
    ttls = policy_ttls(loaded, propagation=propagation, parent_ds=parent_ds_ttl)
    lifetimes = {Role.ZSK: zsk_lifetime * 86400.0}
    if ksk_lifetime > 0:
        lifetimes |= {Role.KSK: ksk_lifetime * 86400.0, Role.CSK: ksk_lifetime * 86400.0}
    current = _load(keys, loaded)
    now = time.time()
    due = due_rollovers(current, now, lifetimes)
    for role in due:
        current = start_rollover(current, role, now, ttls)
        typer.echo(f"{role.value} rollover started")
    if due:
        save_keys(keys, current)


def _when(moment: float | None) -> str:
    if moment is None:
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(moment))


@app.command()
def presign(
    policy: PolicyOption, keys: KeysOption,
    redis_url: Annotated[str, typer.Option("--redis", help="The shared state the keyless "
                                           "DNS servers read (dns serve --dnssec-presigned).")],
    prefix: Annotated[str, typer.Option(help="The state's key prefix.")] = "director",
    once: Annotated[bool, typer.Option(help="Publish one round and exit.")] = False,
    poll: Annotated[float, typer.Option(help="Seconds between checks for a new window, "
                                        "key step, policy or edge report.")] = 1.0,
) -> None:
    """Sign every answer the zone can give and publish the signatures for keyless DNS
    servers; keep doing so as windows, keys, the policy file and the edges' reports
    change (the one process that needs the private keys)."""
    import logging

    import redis

    from director.dnssec.presign import Presigner
    from director.dnssec.presigned import state_client
    from director.dnssec.signer import NoKeys, ZoneSigner

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    loaded = _policy(policy)
    try:
        signer = ZoneSigner(loaded.zone.apex, keys, int(loaded.zone.ttl))
    except NoKeys as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(1) from None
    client = state_client(redis_url, 10.0)
    presigner = Presigner(client, prefix, signer)
    stamp = policy.stat().st_mtime_ns
    while True:
        try:
            presigner.round(loaded)
        except redis.RedisError as exc:
            err.print(f"warning: the shared state is not reachable: {exc}", markup=False)
        if once:
            return
        time.sleep(poll)
        if policy.stat().st_mtime_ns != stamp:
            stamp = policy.stat().st_mtime_ns
            from director import policy_gate

            acceptance = policy_gate.accept(str(policy))
            if acceptance.policy is not None:
                loaded = acceptance.policy
            else:
                err.print(acceptance.error().render(), markup=False)
