# SPDX-License-Identifier: Apache-2.0
"""Stage: a request for a model with a split gets its revision (``revision_split``): the
one its session key picks, or, when no usable server of that revision is left, the next
in the split's order that has one. The ``revision`` filter then keeps only that revision's
servers, and the answer says which revision served it (``x-director-revision``).

A split in the shared state (a rollout's step, ``set_overrides``) takes the place of the
policy's split of the same model until it is withdrawn."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import replace

from aiohttp import web

from regions.balancer.http.exchange import Exchange, Next
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.scheduling.revision_split import RevisionSplit
from regions.balancer.types import RequestInfo


class ChooseRevision:
    """Stage: ``exchange.info.revision`` set from the model's split, if it has one."""

    def __init__(self, splits: Mapping[str, RevisionSplit], pool: BackendPool,
                 rng: random.Random) -> None:
        self.splits = splits
        self.overrides: dict[str, RevisionSplit] = {}
        self.pool = pool
        self.rng = rng

    def set_overrides(self, overrides: Mapping[str, RevisionSplit]) -> list[str]:
        """Split these models as given, in place of the policy's splits; the others by the
        policy. A split naming a revision no server here declares is left out: the
        returned problems say which."""
        declared = {(m, r) for b in self.pool.snapshot().backends for m, r in b.revisions}
        kept, problems = {}, []
        for model, split in overrides.items():
            missing = [r for r, _ in split.weights if (model, r) not in declared]
            if missing:
                problems.append(f"split of {model}: no server here declares "
                                f"{', '.join(missing)}")
            else:
                kept[model] = split
        self.overrides = kept
        return problems

    async def __call__(self, exchange: Exchange, call_next: Next) -> web.StreamResponse:
        if exchange.info is not None:
            exchange.info = self.choose(exchange.info)
        return await call_next(exchange)

    def choose(self, info: RequestInfo) -> RequestInfo:
        """``info`` with its revision, when its model is split (else ``info`` itself)."""
        split = self.overrides.get(info.model) or self.splits.get(info.model)
        if split is None:
            return info
        key = info.session or info.user or info.tenant
        return replace(info, revision=self.available(info.model, split.order(key, self.rng)))

    def available(self, model: str, order: tuple[str, ...]) -> str:
        """The first revision in ``order`` that a usable server of ``model`` serves (the
        first one when none is: the request then waits or is refused as for any model)."""
        served = {b.revision_of(model) for b in self.pool.snapshot().backends
                  if b.usable and model in b.models}
        return next((r for r in order if r in served), order[0])
