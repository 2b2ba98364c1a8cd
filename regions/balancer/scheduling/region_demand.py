# SPDX-License-Identifier: Apache-2.0
"""The region's autoscaling reading now, every model at once (``demand``), as the metrics,
the admin API and the standby servers read it."""

from __future__ import annotations

from regions.balancer.scheduling.admission import Dispatcher
from regions.balancer.scheduling.demand import Desired
from regions.balancer.types import RegionSnapshot


def region_demand(dispatcher: Dispatcher, snap: RegionSnapshot | None = None) -> list[Desired]:
    """Every model's reading now: the models the region's servers declare and those
    asked for (``Dispatcher.demand``)."""
    pool = dispatcher.pool
    snap = snap or pool.snapshot()
    models = set(dispatcher.demand.models())
    for view in snap.backends:
        models.update(view.models)
    now = pool.clock()
    return [dispatcher.demand.read(model, snap.backends, now, dispatcher.loading(model),
                                   dispatcher.queued_for(model)[0])
            for model in sorted(models)]
