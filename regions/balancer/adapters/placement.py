# SPDX-License-Identifier: Apache-2.0
"""Where a LoRA adapter is served: pure decisions over the region's backend views, no I/O.

The adapters known are the policy's (``adapter <name> base <model> path <path>``) and the
ones the servers list in ``/v1/models`` with a ``parent`` (``observe``). Each backend
holds at most its slots of them: the policy's ``adapter-slots`` (its ``--max-cpu-loras``),
else the batch limit its metrics publish (vLLM's ``max_lora``, the ``--max-cpu-loras``
default), else 1 until it says.

``decide`` answers for a request of adapter ``a`` of base model ``m``, among the usable
backends that serve ``m`` and may hold adapters:

1. ``USE``: some holder of ``a`` is within the load bound (``load_bound``, ``1 + epsilon``
   times the mean in flight, as prefix affinity): the request goes to the holders.
2. ``Load(b)`` joining a load of ``a`` already under way on ``b``.
3. ``Load(b, evict)``: the backend that does not hold ``a`` and has room, one whose batch
   has room for another adapter first, then the least loaded: a free slot, or an adapter
   idle for ``min_idle_s`` (the least recently used, unloaded first). Hot adapters thus
   gain replicas as their holders fill, and an adapter in use is never pushed out to make
   room for another.
4. ``QUEUE`` (a ``Use``) when no backend has room but some holder exists (it queues there).
5. Forced ``Load`` on the least loaded backend, evicting its least recently used adapter
   (one with no request there if it has one), when nobody holds ``a`` and nobody has
   room.

``Refuse`` when no usable backend serves the base model with adapter slots.

Among the holders, ``crowded`` names those whose batch has no room for the adapter: its
engine runs ``max_lora`` other adapters already and none of its requests, running or
waiting, is of this one (vLLM's ``vllm:lora_requests_info``, scraped; plus what was sent
there since the last scrape). A request there would wait until one of those adapters has
no request left, so the stage leaves them out while another holder has room; a holder
with room is not crowded, nor one whose metrics say nothing.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from regions.balancer.scheduling.backend import BackendSpec
from regions.balancer.scheduling.load_bound import load_cap, within_bound
from regions.balancer.types import BackendSnapshot

DEFAULT_EPSILON = 0.25
DEFAULT_MIN_IDLE_S = 60.0
UNKNOWN_SLOTS = 1  # vLLM's --max-loras default, until the metrics say
REFUSED_FOR_S = 300.0  # a backend that refused a load is not asked again for this long


class LoraLoad(Protocol):
    """What a scrape says of a backend's adapters (``engines.EngineLoad``)."""

    @property
    def max_loras(self) -> int | None: ...
    @property
    def lora_running(self) -> frozenset[str]: ...
    @property
    def lora_waiting(self) -> frozenset[str]: ...


@dataclass(frozen=True)
class AdapterSpec:
    """An adapter: its name, the model it adapts and where the engine reads it."""

    name: str
    base: str
    path: str
    declared: bool = True  # by the policy (else discovered in a server's /v1/models)


@dataclass(frozen=True)
class Load:
    """Load the adapter on ``backend`` (unloading ``evict`` first), or join its load."""

    backend: str
    evict: str | None = None


@dataclass(frozen=True)
class Refuse:
    why: str


@dataclass(frozen=True)
class Use:
    """Send the request to the backends that hold the adapter (``queued``: none is within
    the load bound and nowhere has room for another copy)."""

    queued: bool = False


USE = Use()
QUEUE = Use(queued=True)
Decision = Use | Load | Refuse


def adapters_of(region: Any) -> tuple[AdapterSpec, ...]:
    """The adapters a policy's region declares (``policies.model.Adapter``)."""
    return tuple(AdapterSpec(a.name, a.base, a.path) for a in getattr(region, "adapters", ()))


def declared_slots(specs: Iterable[BackendSpec]) -> dict[str, int]:
    """The adapter slots the backends declare (``adapter-slots``), by backend."""
    return {s.name: s.adapter_slots for s in specs if s.adapter_slots}


class AdapterPlacement:
    """The adapters each backend holds, and where the next request of one should go."""

    def __init__(self, adapters: Iterable[AdapterSpec] = (),
                 declared_slots: Mapping[str, int] | None = None, *,
                 clock: Callable[[], float], epsilon: float = DEFAULT_EPSILON,
                 min_idle_s: float = DEFAULT_MIN_IDLE_S) -> None:
        self.adapters: dict[str, AdapterSpec] = {a.name: a for a in adapters}
        self.declared_slots = dict(declared_slots or {})
        self.clock = clock
        self.epsilon = epsilon
        self.min_idle_s = min_idle_s
        self.learned_slots: dict[str, int] = {}
        self.held: dict[str, OrderedDict[str, float]] = {}  # backend -> adapter -> last use
        self.loading: dict[str, set[str]] = {}  # adapter -> backends loading it now
        self.refused_until: dict[str, float] = {}
        self.loaded_at: dict[str, dict[str, float]] = {}  # backend -> adapter -> our load
        # backend -> (its max_lora, the adapters of its requests): scraped, plus bindings
        self.active: dict[str, tuple[int, set[str]]] = {}
        self.in_flight: Counter[tuple[str, str]] = Counter()  # (backend, adapter) -> requests
        # adapters taken out of a backend's routing, still registered there until their
        # requests end and the unload goes through: a listing does not bring them back
        self.dropped: dict[str, set[str]] = {}
        self.unloaded_at: dict[str, dict[str, float]] = {}  # backend -> adapter -> when

    # -- what is known ---------------------------------------------------------------------

    def spec(self, model: str) -> AdapterSpec | None:
        """The adapter named ``model`` (None: a model, or an adapter nobody knows)."""
        return self.adapters.get(model)

    def declare(self, adapters: Iterable[AdapterSpec],
                declared_slots: Mapping[str, int]) -> None:
        """The policy changed: these adapters and slots are declared now (adapters found
        in the servers' listings stay known)."""
        self.adapters = {n: a for n, a in self.adapters.items() if not a.declared}
        self.adapters.update((a.name, a) for a in adapters)
        self.declared_slots = dict(declared_slots)

    def base_of(self, model: str) -> str | None:
        """The model ``model`` adapts, if it is a known adapter."""
        spec = self.adapters.get(model)
        return spec.base if spec is not None else None

    def slots(self, backend: str) -> int:
        declared = self.declared_slots.get(backend)
        if declared is not None:
            return declared
        return self.learned_slots.get(backend, UNKNOWN_SLOTS)

    def holding(self, backend: str) -> tuple[str, ...]:
        return tuple(self.held.get(backend, ()))

    def learn_active(self, backend: str, load: LoraLoad) -> None:
        """``backend``'s metrics: its batch limit and its requests' adapters now (nothing
        when they say nothing of LoRA)."""
        if load.max_loras is None:
            return
        self.learned_slots[backend] = load.max_loras
        self.active[backend] = (load.max_loras, set(load.lora_running | load.lora_waiting))

    def bound(self, backend: str, adapter: str) -> None:
        """A request of ``adapter`` was bound to ``backend``: count it as active there
        until the next scrape says otherwise, the adapter as used (not idle), and the
        request in flight there until ``released``."""
        entry = self.active.get(backend)
        if entry is not None:
            entry[1].add(adapter)
        self.used(backend, adapter)
        self.in_flight[(backend, adapter)] += 1

    def released(self, backend: str, adapter: str) -> None:
        """A request of ``adapter`` bound to ``backend`` has ended."""
        key = (backend, adapter)
        if self.in_flight[key] > 1:
            self.in_flight[key] -= 1
        else:
            self.in_flight.pop(key, None)

    def crowded(self, adapter: str, holders: Iterable[str]) -> set[str]:
        """The holders whose batch has no room for ``adapter`` (module docstring)."""
        out = set()
        for name in holders:
            entry = self.active.get(name)
            if entry is not None and adapter not in entry[1] and len(entry[1]) >= entry[0]:
                out.add(name)
        return out

    def observe(self, backend: str, base_models: Iterable[str],
                listed: Mapping[str, tuple[str, str]], read_at: float) -> None:
        """``backend`` listed these adapters at ``read_at`` (name -> (parent, root), from
        its ``/v1/models``): what it holds, and adapters to know (of a model it serves).
        An adapter loaded or being loaded since that read stays."""
        bases = set(base_models)
        held = self.held.setdefault(backend, OrderedDict())
        now = self.clock()
        loaded_at = self.loaded_at.setdefault(backend, {})
        for name in [n for n in held if n not in listed]:
            if loaded_at.get(name, -1e18) < read_at and backend not in self.loading.get(
                    name, ()):
                del held[name]
        dropped = self.dropped.get(backend, set())
        unloaded_at = self.unloaded_at.get(backend, {})
        for name, (parent, root) in listed.items():
            if parent not in bases or name in dropped or unloaded_at.get(name, -1e18) >= read_at:
                continue
            held.setdefault(name, now)
            if name not in self.adapters:
                self.adapters[name] = AdapterSpec(name, parent, root, declared=False)

    # -- what happened ---------------------------------------------------------------------

    def started(self, backend: str, adapter: str, evict: str | None) -> None:
        """A load of ``adapter`` on ``backend`` starts; ``evict`` leaves its routing now
        (and the server once its requests there have ended)."""
        self.loading.setdefault(adapter, set()).add(backend)
        self.dropped.get(backend, set()).discard(adapter)
        if evict is not None:
            self.held.get(backend, OrderedDict()).pop(evict, None)
            self.dropped.setdefault(backend, set()).add(evict)

    def unloaded(self, backend: str, adapter: str) -> None:
        """``adapter`` was unloaded from ``backend`` (or that was given up): a listing
        read before now does not bring it back."""
        self.dropped.get(backend, set()).discard(adapter)
        self.unloaded_at.setdefault(backend, {})[adapter] = self.clock()

    def ended(self, backend: str, adapter: str, ok: bool) -> None:
        """The load ended: ``adapter`` is held there, or the backend refused it."""
        self.loading.get(adapter, set()).discard(backend)
        if ok:
            self.held.setdefault(backend, OrderedDict())[adapter] = self.clock()
            self.loaded_at.setdefault(backend, {})[adapter] = self.clock()
        else:
            self.refused_until[backend] = self.clock() + REFUSED_FOR_S

    def used(self, backend: str, adapter: str) -> None:
        """A request of ``adapter`` was served by ``backend``."""
        held = self.held.get(backend)
        if held is not None and adapter in held:
            held[adapter] = self.clock()
            held.move_to_end(adapter)

    def forget(self, backend: str, adapter: str) -> None:
        """``backend`` no longer holds ``adapter`` (it said so: a restart, an unload)."""
        self.held.get(backend, OrderedDict()).pop(adapter, None)

    # -- deciding --------------------------------------------------------------------------

    def decide(self, adapter: str, views: Sequence[BackendSnapshot]) -> Decision:
        """Where a request of ``adapter`` goes (module docstring)."""
        spec = self.adapters[adapter]
        now = self.clock()
        hosts = [b for b in views if b.usable and spec.base in b.models
                 and self.slots(b.name) > 0 and self.refused_until.get(b.name, 0.0) <= now]
        if not hosts:
            if any(b.usable and adapter in b.models for b in views):
                return USE
            return Refuse(f"no usable GPU server here serves {spec.base} with LoRA "
                          f"adapter slots, so none can load {adapter}")
        cap = load_cap(hosts, 1.0 + self.epsilon)
        holders = [b for b in hosts if adapter in b.models]  # as routing sees them
        if any(within_bound(b, cap) for b in holders):
            return USE
        loading = self.loading.get(adapter)
        if loading:
            return Load(min(loading))
        crowded = self.crowded(adapter, (b.name for b in hosts))
        best: tuple[tuple[bool, int, bool, int], Load] | None = None
        for b in hosts:
            if adapter in b.models:
                continue
            has_room, evict = self._room(b.name, now)
            if has_room:
                rank = (b.name in crowded, b.in_flight, evict is not None,
                        len(self.held.get(b.name, ())))
                if best is None or rank < best[0]:
                    best = (rank, Load(b.name, evict))
        if best is not None:
            return best[1]
        if holders:
            return QUEUE
        b = min(hosts, key=lambda v: v.in_flight)
        held = self.held.get(b.name, OrderedDict())
        full = len(held) + self._loading_on(b.name) >= self.slots(b.name)
        # the least recently used of those with no request there, else of all
        victim = min(held, key=lambda a: self.in_flight[(b.name, a)] > 0, default=None)
        return Load(b.name, victim if full else None)

    def _room(self, backend: str, now: float) -> tuple[bool, str | None]:
        """Whether ``backend`` has room for one more adapter, and what to unload for it
        (None: a slot is free)."""
        held = self.held.get(backend, OrderedDict())
        if len(held) + self._loading_on(backend) < self.slots(backend):
            return True, None
        oldest, last_used = next(iter(held.items()), (None, now))
        if oldest is not None and now - last_used >= self.min_idle_s:
            return True, oldest
        return False, None

    def _loading_on(self, backend: str) -> int:
        return sum(backend in on for on in self.loading.values())
