"""Which keys do what at a moment, and the timings of a rollover (RFC 7583).

At time ``t`` a key is *published* (its DNSKEY is in the zone) from ``publish`` until
``remove``, *signs* from ``activate`` until ``retire``, and for a KSK/CSK is *for the parent*
(in CDS/CDNSKEY) while published and not retired. A zone with no active zone-signing key
among its published keys signs with its published ones rather than not at all.

Rollovers (``start_rollover``, ``confirm_ds``):

- **ZSK, pre-publication** (RFC 7583 section 3.2.1): the new key is published now and
  signs after Ipub = propagation + DNSKEY TTL; the old one stops signing then and is removed
  Iret = propagation + the zone's largest TTL later (signatures are made online, so there
  is no re-signing delay to wait for).
- **CSK or KSK, double signature** (sections 3.2.2 and 3.3): the new key is published and
  signs at once beside the old one; CDS/CDNSKEY list both. Once the operator confirms the
  new DS at the parent (``confirm_ds``), the old key retires after the parent's DS TTL plus
  propagation (resolvers may still hold only the old DS) and is removed Iret later.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from director.dnssec.keys import Role, ZoneKey, generate

DEFAULT_PROPAGATION = 300.0  # seconds for a change to reach every DNS server and secondary
DEFAULT_PARENT_DS_TTL = 86400.0


@dataclass(frozen=True)
class Ttls:
    """The TTLs a rollover waits for."""

    dnskey: float  # the DNSKEY RRset's TTL (the zone TTL)
    largest: float  # the largest TTL of any signed RRset, negative answers included
    propagation: float = DEFAULT_PROPAGATION
    parent_ds: float = DEFAULT_PARENT_DS_TTL


@dataclass(frozen=True)
class KeyState:
    """What the keys do at one moment."""

    published: tuple[ZoneKey, ...]
    zone_signers: tuple[ZoneKey, ...]  # sign every RRset but DNSKEY (and CDS/CDNSKEY)
    key_signers: tuple[ZoneKey, ...]  # sign DNSKEY, CDS and CDNSKEY
    for_parent: tuple[ZoneKey, ...]  # KSK/CSK whose DS the parent should have


def published(key: ZoneKey, t: float) -> bool:
    return key.publish <= t and (key.remove is None or t < key.remove)


def signing(key: ZoneKey, t: float) -> bool:
    return (key.activate is not None and key.activate <= t
            and (key.retire is None or t < key.retire) and published(key, t))


def state_at(keys: Iterable[ZoneKey], t: float) -> KeyState:
    """What ``keys`` do at time ``t`` (ordered by key tag, so the order is stable)."""
    shown = tuple(sorted((k for k in keys if published(k, t)), key=lambda k: k.tag))
    active = [k for k in shown if signing(k, t)]
    zone = tuple(k for k in active if k.role.signs_zone) or tuple(
        k for k in shown if k.role.signs_zone)
    keyset = tuple(k for k in active if k.role.signs_keys) or tuple(
        k for k in shown if k.role.signs_keys)
    parent = tuple(k for k in shown if k.role.signs_keys
                   and (k.retire is None or t < k.retire))
    return KeyState(shown, zone, keyset, parent)


def next_change(keys: Iterable[ZoneKey], t: float) -> float | None:
    """The first moment after ``t`` at which ``state_at`` may differ, or None."""
    times = [moment for k in keys for moment in (k.publish, k.activate, k.retire, k.remove)
             if moment is not None and moment > t]
    return min(times, default=None)


def start_rollover(keys: list[ZoneKey], role: Role, now: float, ttls: Ttls) -> list[ZoneKey]:
    """``keys`` with a rollover of the live key of ``role`` started at ``now``: the new key
    added and the old one's retirement scheduled where its timing is already known.
    ValueError when there is no live key of that role or a rollover of it is under way."""
    live = [k for k in keys if k.role is role and published(k, now)
            and (k.retire is None or k.retire > now)]
    current = [k for k in live if signing(k, now)]
    if not current:
        raise ValueError(f"no active {role.value.upper()} to roll")
    if len(live) > 1:
        raise ValueError(f"a {role.value.upper()} rollover is already under way "
                         f"(keys {', '.join(str(k.tag) for k in live)})")
    old = current[0]
    rest = [k for k in keys if k is not old]
    if role is Role.ZSK:
        activate = now + ttls.propagation + ttls.dnskey
        new = generate(old.zone, role, now, algorithm=old.algorithm, activate=activate)
        retired = old.with_times(retire=activate,
                                 remove=activate + ttls.propagation + ttls.largest)
        return [*rest, retired, new]
    new = generate(old.zone, role, now, algorithm=old.algorithm)
    return [*rest, old, new]


def confirm_ds(keys: list[ZoneKey], tag: int, now: float, ttls: Ttls) -> list[ZoneKey]:
    """``keys`` with the DS of key ``tag`` seen at the parent at ``now``: every older live
    key of its role is scheduled to retire once resolvers can no longer hold only its DS."""
    new = [k for k in keys if k.tag == tag]
    if not new:
        raise ValueError(f"no key with tag {tag}")
    key = new[0]
    if not key.role.signs_keys:
        raise ValueError(f"key {tag} is a ZSK: the parent holds no DS for it")
    retire = now + ttls.parent_ds + ttls.propagation
    out = []
    for k in keys:
        if k is key:
            out.append(k.with_times(ds_seen=now))
        elif (k.role is key.role and k.created < key.created and published(k, now)
              and k.retire is None):
            out.append(k.with_times(retire=retire,
                                    remove=retire + ttls.propagation + ttls.largest))
        else:
            out.append(k)
    return out


def due_rollovers(keys: Iterable[ZoneKey], now: float,
                  lifetimes: dict[Role, float]) -> list[Role]:
    """The roles whose live key is older than its lifetime and not already rolling."""
    due = []
    for role, lifetime in lifetimes.items():
        live = [k for k in keys if k.role is role and published(k, now)
                and (k.retire is None or k.retire > now)]
        if len(live) == 1 and live[0].activate is not None \
                and now - live[0].activate >= lifetime:
            due.append(role)
    return due
