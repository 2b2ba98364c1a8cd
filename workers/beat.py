"""Celery beat scheduler that follows the policy: probes start on load, stop on removal.

Every ``check_every`` seconds it polls its policy source; a changed policy rebuilds the
schedule (:func:`workers.schedule.build_schedule`) and merges it in place: a new GPU server
joins its slot's batch entry (created if it is the slot's first), a removed one leaves it (the
entry goes with its last server), new regions get balancer and latency entries, and entries
that remain keep their last run time.

The policy source is ``app.conf.director_policy_source`` when set (in-process use), else the
file named by ``DIRECTOR_POLICY``, followed by the version stored in the state server once
there is one (``workers.policy_source.StoredPolicy``; ``DIRECTOR_FOLLOW_POLICY=0``: the file
only).

Every worker may run beat: only the holder of the beat lease (``workers.beat_lease``) sends.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from celery.beat import Scheduler

from state.store import StateStore
from workers.beat_lease import BeatLease
from workers.config import WorkerSettings
from workers.errors import PolicySourceError
from workers.policy_source import PolicyFile, PolicySource, policy_source
from workers.schedule import build_schedule

log = logging.getLogger(__name__)


class PolicyScheduler(Scheduler):
    check_every = 2.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._generation = 0
        self._heap_generation = -1
        self._next_check = 0.0
        self._source: PolicySource | None = None
        self._lease: BeatLease | None = None
        super().__init__(*args, **kwargs)

    @property
    def settings(self) -> WorkerSettings:
        return self.app.conf.get("director_settings") or WorkerSettings.from_env()

    def setup_schedule(self) -> None:
        self._source = self.app.conf.get("director_policy_source") or self._file_source()
        settings = self.settings
        store = StateStore.from_url(settings.redis_url, prefix=settings.state_prefix)
        self._lease = BeatLease(store.client, store.keys.beat_leader)
        self.reload()

    def reload(self) -> bool:
        """Poll the policy source; rebuild the schedule if the policy changed."""
        self._next_check = time.monotonic() + self.check_every
        if self._source is None:
            return False
        policy = self._source.poll()
        if policy is None:
            return False
        settings = self.settings
        entries = build_schedule(
            policy, balancer_port=settings.balancer_port, balancer_urls=settings.balancer_urls
        )
        before = set(self.schedule)
        self.merge_inplace(entries)
        self._generation += 1
        added, removed = set(entries) - before, before - set(entries)
        log.info(
            "beat: policy loaded, %d probes (%d added, %d removed)",
            len(entries),
            len(added),
            len(removed),
        )
        return True

    def tick(self, *args: Any, **kwargs: Any) -> float:
        if time.monotonic() >= self._next_check:
            self.reload()
        if self._lease is not None and not self._lease.held():
            return min(self._lease.retry_in(), max(0.0, self._next_check - time.monotonic()))
        delay = super().tick(*args, **kwargs)
        return min(delay, max(0.0, self._next_check - time.monotonic()))

    # Celery compares the whole schedule on every tick to notice edits; with thousands of
    # probes that costs more than sending them. Only reload() edits it: track a generation.
    def schedules_equal(self, old_schedules: Any, new_schedules: Any) -> bool:
        return self._heap_generation == self._generation

    def populate_heap(self, *args: Any, **kwargs: Any) -> None:
        super().populate_heap(*args, **kwargs)
        self._heap_generation = self._generation

    def _file_source(self) -> PolicySource:
        settings = self.settings
        path = settings.policy_path
        if not path:
            raise PolicySourceError("no policy for the probe schedule: set DIRECTOR_POLICY")
        return policy_source(PolicyFile(path), settings)
