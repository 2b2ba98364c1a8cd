"""A region's load when several balancers serve it: one record each, combined by readers.

Each balancer writes its own view of the region into a field of ``{p}:load:region:<region>``
named by its instance (``state.instances``): a JSON object of ``RegionLoad``'s fields and
``pool``, a digest of the GPU servers it sends to. One balancer's record overwriting
another's would show the global tier half of a region's load. Readers combine the records
of one read::

    queue_depth, in_flight, outstanding_seconds   summed: each balancer counts its own
    capacity      per pool, the largest of its balancers' (they measure the same GPUs);
                  summed over pools
    utilization   per pool, summed: each balancer's is its own arrivals (or busy slots)
                  over the pool's capacity (or slots), so the sum is the pool's
                  over pools, weighted by capacity (a mean when none has one)
    timestamp     the newest

A record older than the newest by more than ``SPREAD_S`` is left out: a balancer that
stopped (killed, or cut off from the state) stops adding its last load after that. The
balancer removes records not renewed for ``FORGET_S`` (``stale_sources``), so restarts do
not leave fields behind. A hash written before records had sources (the six fields of one
``RegionLoad``) reads as one more record.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass

from state.errors import RecordError
from state.records import RawHash, RegionLoad, _text

SPREAD_S = 10.0
FORGET_S = 300.0


@dataclass(frozen=True)
class SourcedLoad:
    """One balancer's view of its region: its load and the pool of GPUs it sends to."""

    source: str
    load: RegionLoad
    pool: str = ""

    def to_field(self) -> tuple[str, str]:
        fields = {k: float(v) for k, v in self.load.to_fields().items()}
        return self.source, json.dumps({**fields, "pool": self.pool}, sort_keys=True)


def pool_digest(gpus: Iterable[str]) -> str:
    """A short name for a set of GPU servers: balancers sending to the same set share it."""
    return hashlib.sha256("\n".join(sorted(gpus)).encode()).hexdigest()[:12]


def parse_records(raw: RawHash) -> list[SourcedLoad]:
    """Every balancer's record in a region's hash; malformed ones are left out, and a hash
    of nothing but malformed records is a ``RecordError``."""
    found = _records(raw)
    records = [record for _, record in found if record is not None]
    if not records and found:
        bad = sorted(", ".join(names) for names, _ in found)
        raise RecordError(f"no readable balancer record (malformed: {'; '.join(bad)})")
    return records


def combined(records: Iterable[SourcedLoad]) -> RegionLoad | None:
    """The region's load from its balancers' records (the rules in the module docstring)."""
    records = list(records)
    if not records:
        return None
    newest = max(r.load.timestamp for r in records)
    fresh = [r for r in records if r.load.timestamp >= newest - SPREAD_S]
    pools: dict[str, list[RegionLoad]] = {}
    for record in fresh:
        pools.setdefault(record.pool, []).append(record.load)
    capacities = {pool: max(load.capacity for load in loads) for pool, loads in pools.items()}
    utilizations = {pool: sum(load.utilization for load in loads)
                    for pool, loads in pools.items()}
    capacity = sum(capacities.values())
    if len(pools) == 1:
        utilization = next(iter(utilizations.values()))
    elif capacity > 0:
        utilization = sum(utilizations[p] * capacities[p] for p in pools) / capacity
    else:
        utilization = sum(utilizations.values()) / len(pools)
    return RegionLoad(
        queue_depth=sum(r.load.queue_depth for r in fresh),
        in_flight=sum(r.load.in_flight for r in fresh),
        outstanding_seconds=sum(r.load.outstanding_seconds for r in fresh),
        capacity=capacity,
        utilization=utilization,
        timestamp=newest,
    )


def combined_from_hash(raw: RawHash) -> RegionLoad | None:
    """``combined(parse_records(raw))``: what a reader of the region's hash uses."""
    return combined(parse_records(raw))


def stale_sources(raw: RawHash, now: float, forget_s: float = FORGET_S) -> list[str]:
    """Fields of records not renewed for ``forget_s`` (malformed ones too): to remove."""
    return [name for names, record in _records(raw)
            if record is None or now - record.load.timestamp > forget_s for name in names]


def _records(raw: RawHash) -> list[tuple[list[str], SourcedLoad | None]]:
    """Each record of a region's hash: the fields it takes up, and it read (None when it is
    malformed). The fields named as ``RegionLoad``'s are one record of the layout before
    sources (no instance is named so: instance names carry a ``#``)."""
    fields = _text(raw)
    legacy = {name: fields.pop(name) for name in RegionLoad.FIELDS if name in fields}
    found: list[tuple[list[str], SourcedLoad | None]] = []
    if legacy:
        try:
            found.append((list(legacy), SourcedLoad("", RegionLoad.from_fields(legacy))))
        except RecordError:
            found.append((list(legacy), None))
    for source, text in fields.items():
        try:
            found.append(([source], _parse_one(source, text)))
        except RecordError:
            found.append(([source], None))
    return found


def _parse_one(source: str, text: str) -> SourcedLoad:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RecordError(f"{source}: not JSON") from exc
    if not isinstance(data, dict):
        raise RecordError(f"{source}: expected an object")
    pool = data.get("pool", "")
    if not isinstance(pool, str):
        raise RecordError(f"{source}: pool must be a string")
    values: dict[str, str] = {}
    for name in RegionLoad.FIELDS:
        value = data.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(
                value):
            raise RecordError(f"{source}: {name} must be a finite number")
        values[name] = repr(float(value))
    return SourcedLoad(source, RegionLoad.from_fields(values), pool)

