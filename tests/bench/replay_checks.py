# SPDX-License-Identifier: Apache-2.0
"""Shared checks of the virtual-time routing replay's setups (``bench/routing_des.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from routing_des import Result, run
from routing_trace import Arrival


def replay_counted(setup: str, arrivals: list[Arrival],
                   counted_until: float) -> tuple[list[Result], str]:
    """The outcomes of the requests arriving before ``counted_until``, in arrival order, and
    the router's note."""
    results, note = run(setup, arrivals, None, counted_until)
    return sorted((r for r in results if r.at < counted_until), key=lambda r: r.at), note


def most_bound_at_once(counted: list[Result]) -> int:
    """The most streams one GPU ran at once: at each binding, the streams running there (one
    that ended at that very instant released its slot first)."""
    most = 0
    for r in counted:
        start = r.at + r.queued
        most = max(most, sum(1 for o in counted if o.backend == r.backend
                             and o.at + o.queued <= start < o.at + o.e2e - 1e-9))
    return most
