# SPDX-License-Identifier: Apache-2.0
"""What the balancer learns of its GPUs' speeds on a matrix cell whose speeds are known:
``learned_speeds`` replays a trace slice at the cell's load for ``window`` model seconds
through our balancer (``des``) and returns its ``FleetSpeed`` estimates by server.
``bench/speed_estimate.py`` and the estimator's tests read it."""

from __future__ import annotations

import random

from benchkit import des
from benchkit.matrix import CONTEXT, Cell
from benchkit.routing_matrix import fleet_capacity
from benchkit.routing_trace import arrivals_at_load, load_named
from regions.balancer.scheduling.fleet_speed import Speed


def learned_speeds(cell: Cell, seed: int, window: float) -> dict[str, Speed]:
    """The speeds learned by the end of ``window`` model seconds of the slice ``seed``."""
    trace = load_named(cell.trace, CONTEXT[cell.trace])
    servers = cell.servers()
    offset = random.Random(seed).randrange(len(trace))
    piece = arrivals_at_load(trace, offset, cell.load, fleet_capacity(cell), until=window,
                             span=window, config=servers[0].engine)
    speeds: dict[str, Speed] = {}

    def look(ours: des.Ours) -> None:
        ours.pool.speeds.refit(float("inf"))
        speeds.update(ours.pool.speeds.speeds)

    loop = des.VirtualTimeLoop()
    try:
        loop.run_until_complete(des.replay("ours", servers, piece.arrivals, cell.max_tokens,
                                           window, cut_after=0.0, inspect=look))
    finally:
        loop.close()
    return speeds
