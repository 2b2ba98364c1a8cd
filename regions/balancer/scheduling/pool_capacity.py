# SPDX-License-Identifier: Apache-2.0
"""A pool's capacities (a mixin of ``backends.BackendPool``).

Capacity: each backend's ``CapacityEstimator`` (``capacity``) learns how many requests it
runs at once from scrapes (``set_scraped``) and its engine's limits (``set_engine_limits``),
unless the policy pins it; a view's ``cap`` is that capacity (a guess while unknown) and its
``limit`` what admission lets be in flight there: unbounded while the capacity of any
healthy backend of the region is unknown (``_limit``).

A TTFT sample does not invalidate anything: it arrives while its request holds a lease,
and the release rebuilds that backend's view, so it costs no extra rebuild. Scraped load
(``set_scraped``, about once a second from the shared state) rebuilds the backend's view
only when a value changed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from regions.balancer.scheduling.backend import Backend, ScrapedLoad
from regions.balancer.scheduling.capacity import GUESS_SLOTS, Capacity, CapacityConfig


class PoolCapacity:
    """Capacity learning of ``BackendPool`` (a mixin of it)."""

    capacity_config: CapacityConfig
    _guess: int
    _unsure: bool

    backends: list[Backend]
    by_name: dict[str, Backend]
    clock: Callable[[], float]

    if TYPE_CHECKING:  # BackendPool's, for the type checker only (never shadow it)
        def changed(self, index: int | None = None) -> None: ...

        def invalidate(self, index: int | None = None) -> None: ...

        def _lookup(self, name: str) -> Backend: ...

    def set_scraped(self, name: str, load: ScrapedLoad) -> None:
        """Backend ``name``'s load as last scraped (``ScrapedLoad()``: unknown or stale).
        A scrape with running and waiting is also a capacity observation."""
        b = self._lookup(name)
        if load.running is not None and load.waiting is not None:
            b.capacity.observe(self.clock(), load.running, load.waiting, load.kv_usage)
            self._capacity_changed(b)
        if load != b.scraped:
            b.scraped = load
            self.invalidate(b.index)

    def set_engine_limits(self, name: str, max_running: int | None,
                          max_in_flight: int | None) -> None:
        """What backend ``name``'s engine publishes about its limits (``engines.limits``)."""
        b = self._lookup(name)
        b.capacity.engine_limits(max_running, max_in_flight)
        self._capacity_changed(b)

    def forget_capacity(self, name: str) -> None:
        """Backend ``name`` may have restarted with other settings: learn its capacity anew."""
        b = self._lookup(name)
        b.capacity.forget()
        self._capacity_changed(b)

    def _capacity_changed(self, b: Backend) -> None:
        capacity = b.capacity.current(self.clock())
        if capacity == b.cap_now:
            return
        b.cap_now = capacity
        if self._region_capacity():
            self.changed()  # every view shows the new guess, or the region's new limits
        else:
            self.changed(b.index)  # a higher limit may let queued requests through

    def _region_capacity(self) -> bool:
        """Renew what the region's views share; True if it changed. ``_guess``: what scorers
        assume of a backend whose capacity is unknown, the largest learned in the region
        (its peers are likely alike), else ``GUESS_SLOTS``. ``_unsure``: with late binding,
        some healthy backend's capacity is unknown, without even a provisional limit (no
        scrape has shown it running); then no backend is full (``_limit``).
        Without late binding only pins hold, whatever the others know."""
        known = [b.cap_now.slots for b in self.backends if b.cap_now.slots is not None]
        guess = max(known) if known else GUESS_SLOTS
        unsure = self.capacity_config.late_binding and any(
            b.cap_now.slots is None and not b.cap_now.provisional
            for b in self.backends if b.healthy)
        changed = (guess, unsure) != (self._guess, self._unsure)
        self._guess, self._unsure = guess, unsure
        return changed

    def _limit(self, b: Backend, capacity: Capacity) -> int:
        """What admission lets be in flight at ``b``: its pinned limit, or its learned or
        provisional one (with ``late_binding``) once every healthy backend has one. Until then
        none but a pinned one is full (short of an engine's own in-flight limit): a region
        queue that holds requests for the known backends while an unknown one has "room"
        would send that one every request, hundreds deep in its engine's queue, where
        least-outstanding-requests would have shared them out."""
        if not self._unsure or capacity.source == "pinned":
            return capacity.limit
        return b.capacity.unheld_limit()

    def hold_at_capacity(self, on: bool, provisional: bool = False) -> None:
        """Hold requests in the region queue at learned capacities (``late_binding``), or
        stop; the tenants' fair share needs the queue (``tenancy``), and a provisional limit
        where a capacity is not learned yet (``CapacityConfig.provisional``)."""
        config = self.capacity_config
        if config.late_binding == on and config.provisional == provisional:
            return
        self.capacity_config = replace(config, late_binding=on, provisional=provisional)
        now = self.clock()
        for b in self.backends:
            b.capacity.config = self.capacity_config
            b.cap_now = b.capacity.current(now)
        self.changed()
