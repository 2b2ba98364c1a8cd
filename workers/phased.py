"""A Celery schedule that fires every ``run_every`` seconds at a fixed phase of the wall clock.

Fire times are ``k * run_every + phase`` (Unix time). Giving each probe its own phase in
``[0, run_every)`` spreads probes of the same interval across the interval instead of firing
them in lock-step, and because phases are tied to the wall clock, every beat that builds the
same schedule fires at the same instants (no drift after a restart).
"""

from __future__ import annotations

import math
import time
from datetime import datetime, timedelta
from typing import Any

from celery.schedules import schedstate, schedule


# Lower case like celery's own ``schedule`` and ``crontab``.
class phased(schedule):
    def __init__(self, run_every: float, phase: float = 0.0, app: Any = None) -> None:
        if run_every <= 0:
            raise ValueError(f"run_every must be > 0 (got {run_every})")
        super().__init__(run_every=timedelta(seconds=run_every), app=app)
        self.interval = float(run_every)
        self.phase = float(phase) % self.interval

    def next_fire(self, after: float) -> float:
        """The first fire time strictly after ``after`` (Unix seconds)."""
        k = math.floor((after - self.phase) / self.interval) + 1
        return k * self.interval + self.phase

    def is_due(self, last_run_at: datetime) -> schedstate:
        now = time.time()
        last = self.maybe_make_aware(last_run_at).timestamp()
        due_at = self.next_fire(last)
        if now >= due_at:
            return schedstate(True, self.next_fire(now) - now)
        return schedstate(False, due_at - now)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, phased):
            return (self.interval, self.phase) == (other.interval, other.phase)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.interval, self.phase))

    def __reduce__(self) -> tuple[type, tuple[float, float]]:
        return self.__class__, (self.interval, self.phase)

    def __repr__(self) -> str:
        return f"<phased: every {self.interval:g}s at +{self.phase:.3f}s>"
