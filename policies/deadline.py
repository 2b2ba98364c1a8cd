"""A deadline for checking a policy: the stages look at it between pieces of work.

``check_policy`` and the policy gate (``director.policy_gate``) call ``Deadline.check``
between files, blocks, stages and services; past the deadline it raises
``DeadlineExceeded``, which they turn into an error refusing the policy. A piece of work
under way is not interrupted: the caps of ``policies.limits`` bound each piece.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from policies.errors import DeadlineExceeded
from policies.model import SourcePos


class Deadline:
    """``seconds`` from now on ``clock``; ``check`` raises once they have passed."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not seconds > 0:
            raise ValueError(f"a deadline must be above zero seconds, not {seconds}")
        self.seconds = seconds
        self._clock = clock
        self._at = clock() + seconds

    def check(self, doing: str, pos: SourcePos | None = None) -> None:
        """Raise ``DeadlineExceeded`` (saying what was under way: ``doing``, at ``pos``)
        once past it."""
        if self._clock() > self._at:
            raise DeadlineExceeded(self.seconds, doing, pos)

    def left(self) -> float:
        """Seconds left (negative: past)."""
        return self._at - self._clock()


def check(deadline: Deadline | None, doing: str, pos: SourcePos | None = None) -> None:
    """``deadline.check(doing, pos)``, when there is a deadline."""
    if deadline is not None:
        deadline.check(doing, pos)
