# SPDX-License-Identifier: Apache-2.0
"""A model's traffic split over its revisions, and which revision a request gets.

A split (the policy's region ``split <model> <revision> <percent>% ...``) gives each revision
of a model a weight. A request with a session key (``x-director-session``, the body's
``user``, else its tenant) gets the revision that wins a weighted rendezvous hash of that
key (each revision scores ``-ln(u) / weight`` with ``u`` uniform from a keyed BLAKE2b of
key and revision; the lowest wins): every balancer, in every region and after every
restart, sends one session to one revision, each revision gets its weight's share of
sessions, and growing a revision's weight moves sessions only onto it (a canary at 5 %
keeps its sessions at 25 %). A request without a key is drawn by weight.

``order`` is the chosen revision first, then the others by weight: the ``revision`` filter
falls back to the next when no server of the chosen one can be had.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass

from regions.balancer.errors import BalancerConfigError


@dataclass(frozen=True)
class RevisionSplit:
    """``weights``: (revision, percent) pairs, in the order declared; the percents add to
    100 (a revision at 0 % gets nothing, unless every other one is unavailable)."""

    model: str
    weights: tuple[tuple[str, float], ...]

    def __post_init__(self) -> None:
        names = [name for name, _ in self.weights]
        if not names or len(set(names)) != len(names):
            raise BalancerConfigError(f"split {self.model}: revisions must be named once each")
        if any(w < 0 for _, w in self.weights) or not math.isclose(
                sum(w for _, w in self.weights), 100.0, abs_tol=1e-6):
            raise BalancerConfigError(f"split {self.model}: the percents must add to 100")

    def order(self, key: str | None, rng: random.Random) -> tuple[str, ...]:
        """The revisions in the order a request with session ``key`` tries them."""
        live = [(name, w) for name, w in self.weights if w > 0]
        if key is None:
            chosen = rng.choices([n for n, _ in live], weights=[w for _, w in live])[0]
        else:
            chosen = min(live, key=lambda nw: _rendezvous(key, nw[0], nw[1]))[0]
        rest = sorted((nw for nw in self.weights if nw[0] != chosen), key=lambda nw: -nw[1])
        return (chosen, *(name for name, _ in rest))


def _rendezvous(key: str, revision: str, weight: float) -> float:
    digest = hashlib.blake2b(key.encode(), key=revision.encode()[:64], digest_size=8).digest()
    unit = (int.from_bytes(digest, "big") + 1) / 2.0**64  # in (0, 1]
    return -math.log(unit) / weight
