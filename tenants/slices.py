"""What one gate holds of a tenant's shared quota, and what it last saw of the shared buckets.

Redis keeps each rate bucket (GCRA, :mod:`tenants.local_limits`) as the source of truth. A
gate does not ask it about every request: it takes a *slice* of each of the tenant's buckets
("charge these N units now", :data:`~tenants.quota_scripts.TAKE`) and admits requests
locally while the slice lasts. Per bucket of ``B`` units (its size: ``L`` units a minute
without a burst), for requests costing ``c`` (1 for the request bucket, the last admitted
request's input tokens for the input bucket)::

    slice      s = max(ceil(fraction · B), c)          fraction 0.25 % by default
    low water  w = max(low_water · s, c)               low_water 0.5 by default

When what a gate holds of a bucket falls below ``w``, it takes one more slice in the
background (only if the bucket, as last seen, has room for a whole one: when it is nearly
empty the next request asks Redis itself, for just what it needs), so the round trip is off
the request path. One top-up at a time per tenant, so a gate never holds ``w + s`` or more:
with the defaults and ``c`` small, under 0.375 % of ``B`` per bucket and gate.

Output tokens are not known at admission. A request is admitted while the gate holds some of
the output bucket and, as it last saw it, the bucket is not in debt; its tokens are taken
from what the gate holds as they stream, below zero if they must (a running stream is never
cut), and the gate pays Redis what it holds below zero in batches
(:mod:`tenants.quota_settle`). Output slices are ``ceil(fraction · B)`` with the same low
water, but only while that is at least the last request's output: a smaller bucket (under
400 requests' output) is not sliced, and each of its requests asks Redis. Input tokens are
charged at admission on an estimate and settled, like output tokens, with the engine's own
count when the request ends (:meth:`TenantView.correct`): what the gate holds below zero of
the input bucket is owed too, and a refund is held like a slice.

Error bound. Every request and input-token unit admitted was charged in Redis first, so over
any interval the units admitted by all gates exceed GCRA's allowance by at most what they
held at its start, and fall short of it by at most what they hold at its end: ``n`` gates,
under ``n·(w + s)`` (0.75 % of ``B`` for two gates, 1.9 % for five). Output tokens may exceed
it, in addition, by what the requests admitted on a gate's last units produce beyond them
(one request's output per gate when its requests run one after another; with requests in
flight, theirs too, as for any check made before the tokens exist). Held units expire
``ttl_s`` after they were taken and go back to the bucket (never past full), so a gate
neither strands budget another gate could use nor spends old budget late.

When a request cannot be admitted from what the gate holds, the backlog last seen decides a
refusal (``Retry-After`` from the shared bucket; the wait is shorter than the truth if other
gates have charged since, never longer unless one returned budget since); otherwise the gate
asks Redis.

This module is the bookkeeping only: no I/O, no clock of its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tenants.local_limits import WINDOW_S, Bucket, gcra_wait
from tenants.quota_scripts import NOT_CHECKED

SLICED = ("requests", "input_tokens")  # charged when a request is admitted
INPUT = "input_tokens"  # charged on an estimate, settled with the engine's count
OUTPUT = "output_tokens"  # charged as the answer streams

DEFAULT_FRACTION = 0.0025
DEFAULT_LOW_WATER = 0.5
DEFAULT_TTL_S = 10.0


@dataclass(frozen=True)
class SliceRules:
    """How much of a bucket a gate takes at a time, and how long what it holds stays good."""

    fraction: float = DEFAULT_FRACTION
    low_water: float = DEFAULT_LOW_WATER
    ttl_s: float = DEFAULT_TTL_S

    def __post_init__(self) -> None:
        if not 0 < self.fraction <= 1:
            raise ValueError(f"slice fraction must be in (0, 1], not {self.fraction}")
        if not 0 <= self.low_water <= 1:
            raise ValueError(f"slice low water must be in [0, 1], not {self.low_water}")
        if not self.ttl_s > 0:
            raise ValueError(f"slice ttl_s must be positive, not {self.ttl_s}")

    def size(self, capacity: float, cost: float) -> int:
        """Units in one slice of a bucket of ``capacity`` units, for requests of ``cost``."""
        return max(1, math.ceil(self.fraction * capacity), math.ceil(cost))

    def low(self, capacity: float, cost: float) -> float:
        """Below this many units in hand, the gate takes another slice."""
        return max(self.low_water * self.size(capacity, cost), cost)

    def output_size(self, capacity: float, produced: float) -> int:
        """Units in one slice of an output bucket of ``capacity`` tokens, whose requests
        produce ``produced`` tokens; 0 when a slice would hold less than one request's
        output (the gate then asks Redis about every request)."""
        share = self.fraction * capacity
        return math.ceil(share) if share >= produced else 0


@dataclass
class Held:
    """One rate bucket of one tenant as this gate sees it."""

    limit: float  # per minute
    window: float = WINDOW_S  # seconds the bucket spans: its size is window / interval
    units: float = 0.0  # charged in Redis, unspent here (below zero: units owed)
    in_flight: float = 0.0  # units sent by a SETTLE not answered yet (negative: returned)
    tat: float | None = None  # the shared tat when last seen, on the gate's clock
    seen_at: float = -math.inf
    taken_at: float = 0.0
    cost: float = 1.0  # the last request's cost, which sizes the slices
    after: bool = False  # charged after the fact: output tokens
    _sized_for: tuple[float, float, float] = field(default=(0.0, 0.0, 0.0), repr=False)
    _sized: tuple[int, float] = field(default=(0, 0.0), repr=False)

    @property
    def interval(self) -> float:
        return WINDOW_S / self.limit

    @property
    def capacity(self) -> float:
        """Units the bucket holds when full (its burst)."""
        return self.window / self.interval

    def sized(self, rules: SliceRules) -> tuple[int, float]:
        """The slice size and low-water mark of this bucket now."""
        if self._sized_for != (self.limit, self.window, self.cost):
            self._sized_for = (self.limit, self.window, self.cost)
            capacity = self.capacity
            if self.after:
                size = rules.output_size(capacity, self.cost)
                self._sized = size, rules.low_water * size
            else:
                self._sized = rules.size(capacity, self.cost), rules.low(capacity, self.cost)
        return self._sized

    def backlog(self, now: float) -> float:
        """Seconds the bucket is ahead of ``now`` for this gate's requests: the shared backlog
        last seen, plus what is on its way to Redis, less what this gate holds (negative: it
        holds more than the bucket owes)."""
        return self._shared(now) + (self.in_flight - self.units) * self.interval

    def room(self, now: float) -> float:
        """Units the shared bucket had room for, as last seen, less what this gate has used
        and not yet charged."""
        return ((self.window - self._shared(now)) / self.interval - self.in_flight
                - max(0.0, -self.units))

    def _shared(self, now: float) -> float:
        return 0.0 if self.tat is None else max(0.0, self.tat - now)


@dataclass(frozen=True)
class Plan:
    """What the gate can decide about one request without Redis: a refusal (``refused_by``,
    ``wait_s``), an admission from what it holds (``local``), or neither (ask Redis)."""

    refused_by: str | None = None
    wait_s: float = 0.0
    local: bool = False


@dataclass
class TenantView:
    """A tenant's buckets at one gate: what it holds of each, and what it last saw."""

    held: dict[str, Held] = field(default_factory=dict)
    limits: dict[str, float] = field(default_factory=dict)  # the rates now in force
    windows: dict[str, float] = field(default_factory=dict)  # their buckets' spans

    def follow(self, limits: Mapping[str, float],
               windows: Mapping[str, float] | None = None) -> None:
        """Apply the tenant's current per-minute rates and the seconds their buckets span
        (a minute where not given); units held of a bucket that is no longer limited are
        returned when they expire."""
        spans = {name: (windows or {}).get(name, WINDOW_S) for name in limits}
        if limits == self.limits and spans == self.windows:
            return
        self.limits = dict(limits)
        self.windows = spans
        for name, limit in limits.items():
            held = self.held.get(name)
            if held is None:
                self.held[name] = Held(limit, spans[name], after=name == OUTPUT)
            else:
                held.limit, held.window = limit, spans[name]

    def plan(self, costs: Mapping[str, float], now: float) -> Plan:
        """Decide a request costing ``costs`` (per sliced bucket) from what is held and seen.
        The output bucket admits while the gate holds some of it and, as last seen, it is
        not in debt."""
        refused_by, wait, local = None, 0.0, True
        for name in self.limits:
            held = self.held[name]
            if name == OUTPUT:
                if held.tat is None:
                    local = False
                    continue
                waited = held.backlog(now) - held.window
                local = local and held.units > 0
            else:
                short = costs[name] - held.units
                if short <= 0:
                    continue
                local = False
                if held.tat is None:
                    continue
                waited = gcra_wait(held.tat + held.in_flight * held.interval, now,
                                   held.interval, short, held.window)
            if waited > wait:
                refused_by, wait = name, waited
        return Plan(refused_by, wait, local and refused_by is None)

    def needs(self, reserved: Mapping[str, float], costs: Mapping[str, float],
              ) -> dict[str, int]:
        """What a request Redis is asked about must get of each bucket, beyond ``reserved``
        (-1: nothing, not checked; output: 0, checked for debt, while the gate holds none)."""
        need = {name: round(cost - reserved[name]) or NOT_CHECKED
                for name, cost in costs.items()}
        held = self.held.get(OUTPUT)
        if OUTPUT in self.limits and held is not None and held.units <= 0:
            need[OUTPUT] = 0
        return need

    def spend(self, costs: Mapping[str, float]) -> None:
        """Admit a request from what is held."""
        for name, cost in costs.items():
            held = self.held[name]
            held.units -= cost
            held.cost = cost

    def reserve(self, costs: Mapping[str, float]) -> dict[str, float]:
        """Set aside what is held towards a request Redis is asked about; its ``need`` is
        the rest. Give it back with :meth:`unreserve` if the request is refused."""
        reserved = {}
        for name, cost in costs.items():
            held = self.held[name]
            held.cost = cost
            reserved[name] = min(max(0.0, held.units), cost)
            held.units -= reserved[name]
        return reserved

    def unreserve(self, reserved: Mapping[str, float]) -> None:
        for name, units in reserved.items():
            self.held[name].units += units

    def wants(self, rules: SliceRules, now: float, *, prefetch: bool) -> dict[str, int]:
        """The slices to take: one of each bucket below its low-water mark; for a prefetch,
        only where the bucket had room for a whole slice when last seen."""
        wanted = {}
        for name in self.limits:
            held = self.held[name]
            size, low = held.sized(rules)
            if not size or held.units >= low:
                continue
            if prefetch and held.tat is not None and held.room(now) < size:
                continue
            wanted[name] = size
        return wanted

    def owed(self) -> float:
        """Tokens not yet charged: output streamed here beyond what the gate held, and input
        read beyond what finished requests were charged."""
        return sum(max(0.0, -held.units) for name, held in self.held.items()
                   if name in (INPUT, OUTPUT))

    def pending(self) -> float:
        """Output tokens the shared bucket does not count yet: owed and on their way."""
        held = self.held.get(OUTPUT)
        return 0.0 if held is None else held.in_flight + max(0.0, -held.units)

    def owe(self, tokens: float, *, produced: float | None = None) -> None:
        """Take ``tokens`` output tokens from what is held (negative: overcounted ones come
        back); ``produced``: a request ended, having produced that many (which sizes the
        output bucket's slices)."""
        held = self.held.get(OUTPUT)
        if held is not None:
            held.units -= tokens
            if produced is not None:
                held.cost = max(1.0, produced)

    def correct(self, input_tokens: float) -> None:
        """A request's prompt turned out ``input_tokens`` longer than charged (negative:
        shorter): owed to the input bucket, settled like output tokens; or, refunded, held
        like a slice."""
        held = self.held.get(INPUT)
        if held is not None and INPUT in self.limits:
            held.units -= input_tokens

    def low(self, rules: SliceRules) -> bool:
        """Whether the output bucket is below its low-water mark (a top-up is due)."""
        held = self.held.get(OUTPUT)
        return OUTPUT in self.limits and held is not None and held.units < held.sized(rules)[1]

    def see(self, backlogs: Mapping[str, float], at: float) -> None:
        """Remember the shared backlogs Redis reported for a call sent at ``at``."""
        for name, backlog in backlogs.items():
            held = self.held.get(name)
            if held is not None:
                held.tat, held.seen_at = at + backlog, at

    def took(self, granted: Mapping[str, int], need: Mapping[str, int], at: float) -> None:
        """Add to what is held the units Redis granted beyond each request's ``need``."""
        for name in (*SLICED, OUTPUT):
            held = self.held.get(name)
            extra = granted.get(name, 0) - max(0, need.get(name, 0))
            if held is not None and extra > 0:
                held.units += extra
                held.taken_at = at

    def to_settle(self, now: float, rules: SliceRules, *, everything: bool = False,
                  ) -> dict[str, float]:
        """The units a ``SETTLE`` sent now carries, marked in flight: the output and input
        tokens owed, and, returned, the units held longer than ``ttl_s`` (``everything``:
        all of them) or of an output bucket too small to slice (a refund)."""
        units: dict[str, float] = {}
        for name, held in self.held.items():
            owed = held.units < 0
            returned = held.units > 0 and (everything or self._expired(name, held, now, rules))
            if owed or returned:
                units[name] = -held.units
                held.in_flight -= held.units
                held.units = 0.0
        return units

    def settling(self, rules: SliceRules) -> bool:
        """Whether there are tokens to settle now: input or output tokens owed, or output
        tokens refunded on a bucket too small to slice."""
        held = self.held.get(INPUT)
        if held is not None and held.units < 0:
            return True
        held = self.held.get(OUTPUT)
        if held is None:
            return False
        return held.units < 0 or (held.units > 0 and not held.sized(rules)[0])

    def _expired(self, name: str, held: Held, now: float, rules: SliceRules) -> bool:
        return (now - held.taken_at >= rules.ttl_s or name not in self.limits
                or (held.after and not held.sized(rules)[0]))

    def settled(self, units: Mapping[str, float], backlogs: Mapping[str, float],
                at: float) -> None:
        """A ``SETTLE`` sent at ``at`` with ``units`` was applied."""
        for name, amount in units.items():
            self.held[name].in_flight -= amount
        self.see(backlogs, at)

    def unsettled(self, units: Mapping[str, float]) -> None:
        """A ``SETTLE`` failed: the output tokens are owed again; returned slices are
        dropped (they stay charged in Redis, and the bucket refills on its own)."""
        for name, amount in units.items():
            held = self.held[name]
            held.in_flight -= amount
            if amount > 0:
                held.units -= amount

    def expiry(self, ttl_s: float) -> float | None:
        """When the oldest unspent slice expires (None: nothing held)."""
        times = [held.taken_at + ttl_s for held in self.held.values() if held.units > 0]
        return min(times, default=None)

    def buckets(self, now: float) -> dict[str, Bucket]:
        """The limited buckets as this gate's requests see them, for the headers."""
        return {name: Bucket.from_backlog(limit, max(0.0, self.held[name].backlog(now)),
                                          self.held[name].window)
                for name, limit in self.limits.items()}

    def outstanding(self) -> dict[str, float]:
        """Units held of each bucket (charged in Redis, not spent here)."""
        return {name: max(0.0, held.units) for name, held in self.held.items()}


def intervals(held: Mapping[str, Held], names: Iterable[str]) -> dict[str, float]:
    """Seconds per unit of the named buckets, as the scripts take them."""
    return {name: held[name].interval for name in names}


def windows(held: Mapping[str, Held], names: Iterable[str]) -> dict[str, float]:
    """Seconds the named buckets span, as ``TAKE`` takes them."""
    return {name: held[name].window for name in names}
