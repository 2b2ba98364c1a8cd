# SPDX-License-Identifier: Apache-2.0
"""Apply a new list of GPU servers to a live pool (a new policy version changed them).

- a new name joins at the end of the pool in slow start (its cap ramps up from 1 over
  ``OutlierConfig.slow_start_s``);
- a name no longer listed is drained under the ``"policy"`` source: no new requests, its
  in-flight streams finish; once idle it leaves the pool (``idle_retired``, ``remove``);
- a listed name whose URL changed: the old backend drains under a retired name
  (``NAME~1``, ``NAME~2``, ...) while a new one joins under the name;
- changed models or concurrency cap: applied in place;
- a name listed again while it still drains for the policy rejoins (slow start).

An empty list is refused (``BalancerConfigError``): the pool keeps what it has. Leases
hold their ``Backend``, not its index, and a pick takes its lease in the same synchronous
step as the snapshot it read, so re-indexing the pool on removal is safe.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from regions.balancer.errors import BalancerConfigError
from regions.balancer.scheduling.backend import Backend, BackendSpec, model_set
from regions.balancer.scheduling.backends import BackendPool

POLICY = "policy"


@dataclass(frozen=True)
class PoolChange:
    """What ``apply_specs`` did; ``renamed``: (name, retired name) of replaced backends."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    replaced: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    renamed: tuple[tuple[str, str], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.replaced or self.updated)

    def describe(self) -> str:
        parts = [
            f"{label} {', '.join(names)}"
            for label, names in (
                ("added", self.added),
                ("removed", self.removed),
                ("replaced", self.replaced),
                ("updated", self.updated),
            )
            if names
        ]
        return "; ".join(parts) or "no change"


def apply_specs(pool: BackendPool, specs: Sequence[BackendSpec]) -> PoolChange:
    """Make ``pool`` serve exactly ``specs`` (see the module docstring)."""
    wanted: dict[str, BackendSpec] = {}
    for spec in specs:
        if spec.name in wanted:
            raise BalancerConfigError(f"backend {spec.name}: duplicate name")
        wanted[spec.name] = spec
    if not wanted:
        raise BalancerConfigError("backends: the new list has no GPU server")
    now = pool.clock()
    added: list[str] = []
    removed: list[str] = []
    replaced: list[str] = []
    updated: list[str] = []
    renamed: list[tuple[str, str]] = []
    for name, spec in wanted.items():
        b = pool.by_name.get(name)
        if b is None:
            _join(pool, spec, now)
            added.append(name)
        elif b.spec.url != spec.url:
            retired = _retired_name(pool, name)
            b.spec = dataclasses.replace(b.spec, name=retired)
            b.drains.add(POLICY)
            pool.by_name[retired] = b
            del pool.by_name[name]
            _join(pool, spec, now)
            replaced.append(name)
            renamed.append((name, retired))
        else:
            if b.spec != spec:
                b.spec = spec
                b.models = model_set(spec.models)
                updated.append(name)
            if POLICY in b.drains:
                b.drains.discard(POLICY)
                b.slow_start_from = now
                added.append(name)
    for b in pool.backends:
        if b.name not in wanted and POLICY not in b.drains:
            b.drains.add(POLICY)
            removed.append(b.name)
    change = PoolChange(
        tuple(added), tuple(removed), tuple(replaced), tuple(updated), tuple(renamed)
    )
    if change:
        pool.changed()
    return change


def _join(pool: BackendPool, spec: BackendSpec, now: float) -> None:
    b = Backend(spec, len(pool.backends))
    b.slow_start_from = now
    pool.backends.append(b)
    pool.by_name[spec.name] = b
    pool.membership += 1


def _retired_name(pool: BackendPool, name: str) -> str:
    n = 1
    while f"{name}~{n}" in pool.by_name:
        n += 1
    return f"{name}~{n}"


def retiring(pool: BackendPool) -> list[Backend]:
    """Backends draining because the policy no longer lists them."""
    return [b for b in pool.backends if POLICY in b.drains]


def idle_retired(pool: BackendPool) -> list[Backend]:
    """Retiring backends whose last stream has finished: ready to leave."""
    return [b for b in retiring(pool) if b.in_flight == 0]


def remove(pool: BackendPool, backend: Backend) -> None:
    """Take ``backend`` out of the pool (it must be idle) and re-index the rest."""
    if backend.in_flight:
        raise BalancerConfigError(f"backend {backend.name}: {backend.in_flight} in flight")
    kept = [b for b in pool.backends if b is not backend]
    if len(kept) == len(pool.backends):
        return
    pool.backends[:] = kept
    pool.membership += 1
    for i, b in enumerate(kept):
        b.index = i
    if pool.by_name.get(backend.name) is backend:
        del pool.by_name[backend.name]
    pool.changed()
