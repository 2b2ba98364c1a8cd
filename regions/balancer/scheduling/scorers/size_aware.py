# SPDX-License-Identifier: Apache-2.0
"""``size-aware`` scorer: keep the fast GPUs for the long requests (size-interval placement),
and tell the dispatcher when a request is worth holding for one (late binding).

Size. ``request_info`` predicts a request's output from what was learned of the model's
answers (``output_lengths``: the share of its cap an answer fills, per prompt and cap size),
so with declared lengths a request's size is its own and with one loose cap for all it is
the mean answer to prompts of its size; ``size`` is its ``cost_tokens`` (prompt /
prefill_ratio + predicted output). ``refine`` (the dispatcher calls it once per request)
records it in the window.

Budget. Learned over the recent requests (``SizeWindow``)::

    budget_s = slack * q95(recent sizes) / fastest tokens_per_s    (the backends' latest rates)

about what a long request of this workload takes on the fastest GPU. When the predicted
outputs do not differ (``q95 < spread * median``: every request looks alike, as with one cap
for all) the scorer abstains: 1 for every candidate, and it never asks to hold.

Score. For each candidate ``b`` (the ``capacity`` filter has run: each has room)::

    finish_b = wait_b + size / tokens_per_s_b
    wait_b   = 0 if in_flight_b < cap_b, else (in_flight_b - cap_b + 1) * job_s_b / cap_b,
               job_s_b = work_tokens_b / in_flight_b / tokens_per_s_b   (prefetched: it queues)
    limit    = max(kappa * min_c finish_c, budget_s)
    score_b  = 1                          if finish_b <= limit, its first token is within
                                          first_limit (below) and (in_flight_b < cap_b or
                                          no candidate has a free slot)   (acceptable)
             = 0.5 * min_c finish_c / finish_b   otherwise

First token. A long prompt with a short answer is small work but a long prefill: on a slow
GPU its first token (and the first tokens of whatever queues behind its prefill) comes late.
A server prefills the prompts it was sent before this one first, so a candidate's first
token comes after its backlog (``prefill_tokens``: prompts sent there with no first byte
yet) as well: ``first_b = wait_b + (prefill_tokens_b + prompt) / tokens_per_s_b``. A
candidate is acceptable only if that ends within::

    first_limit = max(first_kappa * min_c first_c,
                      first_slack * median recent prompt cost / slowest rate)

that is, no later than a typical prompt does on the slowest GPU, or nearly as soon as
anywhere.

With a weight above twice the sum of the other scorers' weights (the default profile: 8
against 2 + 1) this is a hard preference: the others (outstanding work, queue depth) choose
among the acceptable backends, so short requests spread over the slow GPUs too and long
ones reach only the GPUs where they finish within the budget (or nearly as soon as
anywhere); when none is acceptable the soonest finish wins.

Late binding, asked by the dispatcher (``admission``):

- ``hold_s`` about the backend the pipeline chose: if it is not acceptable against every
  eligible backend, full ones included (their finish counts their wait), the best of those
  has no free slot, and at least ``busy`` of the eligible slots are in use, the request may
  wait in the region queue for up to ``hold * finish_best`` seconds rather than start now.
  The ``busy`` gate keeps a lightly loaded region from holding anything. Off by default
  (``hold`` 0; its measured effect: ``docs/research/``). With ``hold_first`` > 0 the hold
  is capped at that many median prompts' prefill on the slowest GPU
  (``typical_first_s``), for operators who would rather pay a long answer's wait in
  end-to-end time than in time to first token (off by default).
- ``hold_s`` about the first token (``first_hold`` > 0): if the chosen backend would
  prefill the prompt (after the prompts sent there before it) beyond ``first_limit``
  against every eligible backend, full ones included (their first token counts their
  wait for a slot), the soonest of those has no free slot and the region is ``busy``,
  the request may wait up to ``first_hold * first_soonest`` seconds. The case is a
  4,000-token prompt with a short answer when only a 0.4 GPU has a slot: 0.65 s of
  prefill there, and every prompt sent there after it waits behind it, against a slot
  on a fast GPU a fraction of a second away and 0.25 s of prefill. ``acceptable`` then
  also asks the first token to come within ``first_slack`` median prompts on the
  slowest GPU. Off by default (``docs/research/routing-experiments.md``).
- ``precedence_s``: in the queue a request counts as having arrived ``lead * size /
  fastest`` seconds early, so in a backlog the long ones start a little sooner (their
  end-to-end time is the wait plus a long service). Off by default: in the bursts that
  fill a fleet it pushes every short request back by up to seconds
  (``docs/research/routing-experiments.md``).

Parameters (defaults): ``slack`` 1.5, ``kappa`` 1.2, ``busy`` 0.85, ``hold`` 0 (off),
``hold_first`` 0 (no cap), ``first_hold`` 0 (off), ``lead`` 0, ``first_kappa`` 1.5,
``first_slack`` 1.5 (declared in ``PARAMS``: ``hold`` and ``first_hold`` are clamped to 10
when a profile is built), ``window`` (a fresh ``SizeWindow``: 512 requests, q95, spread 1.2).
One window per balancer: with several models their sizes and means mix.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from regions.balancer.scheduling.finish_time import finish_s, first_s, prefill_s, wait_s
from regions.balancer.types import BackendSnapshot, RequestInfo
from routing.params import Param, validate

# a hold longer than ten times the best finish cannot pay for itself: the wait alone is
# ten finishes; larger settings are clamped to it
PARAMS = (
    Param("slack", 1.5, low=0.0, above_low=True),
    Param("kappa", 1.2, low=1.0),
    Param("busy", 0.85, low=0.0, high=1.0),
    Param("hold", 0.0, low=0.0, clamp=(0.0, 10.0)),
    Param("lead", 0.0, low=0.0),
    Param("first_kappa", 1.5, low=1.0),
    Param("first_slack", 1.5, low=0.0, above_low=True),
    Param("hold_first", 0.0, low=0.0),
    Param("first_hold", 0.0, low=0.0, clamp=(0.0, 10.0)),
)


@dataclass
class SizeWindow:
    """What the scorer learns from recent requests: their predicted sizes and outputs, and
    each backend's latest decode rate.

    ``reference()`` is ``(q_size, fastest_rate)``, or None while fewer than ``min_samples``
    requests were seen or when the predicted outputs do not differ (``q < spread *
    median``); recomputed every ``refresh`` requests, so reading it costs nothing.
    """

    size: int = 512
    quantile: float = 0.95
    spread: float = 1.2
    min_samples: int = 32
    refresh: int = 64
    _seen: deque[tuple[float, float]] = field(init=False, repr=False)
    _rates: dict[str, float] = field(default_factory=dict, init=False, repr=False)
    _reference: tuple[float, float] | None = field(default=None, init=False, repr=False)
    _typical_first: float = field(default=0.0, init=False, repr=False)
    _stale: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.size < 1 or not 0 < self.quantile <= 1 or self.spread < 1:
            raise ValueError(
                f"size window: need size >= 1, 0 < quantile <= 1, spread >= 1; got "
                f"{self.size}, {self.quantile}, {self.spread}"
            )
        self._seen = deque(maxlen=self.size)

    def observe(self, prompt_cost: float, output: float) -> None:
        """One request: its prompt in decode-token equivalents and its predicted output."""
        seen = self._seen
        seen.append((prompt_cost, output))
        self._stale += 1
        if self._stale >= self.refresh or len(seen) == self.min_samples:
            self._recompute()

    def observe_rate(self, backend: str, tokens_per_s: float) -> None:
        if backend not in self._rates:
            self._stale = self.refresh  # a new backend: recompute at the next request
        self._rates[backend] = tokens_per_s

    def reference(self) -> tuple[float, float] | None:
        return self._reference

    def typical_first_s(self) -> float:
        """Seconds the median recent prompt takes to prefill on the slowest backend (its
        cost over that backend's decode rate); 0 until ``reference()`` is known."""
        return self._typical_first

    def _recompute(self) -> None:
        self._stale = 0
        n = len(self._seen)
        if n < self.min_samples or not self._rates:
            self._reference = None
            return
        sizes = sorted(p + o for p, o in self._seen)
        outputs = sorted(o for _, o in self._seen)
        at = min(n - 1, int(self.quantile * n))
        fastest = max(self._rates.values())
        informative = outputs[at] >= self.spread * outputs[n // 2] and fastest > 0
        self._reference = (sizes[at], fastest) if informative else None
        slowest = min(self._rates.values())
        median_prompt = sorted(p for p, _ in self._seen)[n // 2]
        self._typical_first = median_prompt / slowest if informative and slowest > 0 else 0.0


@dataclass
class SizeAwareScorer:
    slack: float = 1.5
    kappa: float = 1.2
    busy: float = 0.85
    hold: float = 0.0
    lead: float = 0.0
    first_kappa: float = 1.5
    first_slack: float = 1.5
    hold_first: float = 0.0
    first_hold: float = 0.0
    window: SizeWindow = field(default_factory=SizeWindow)
    name: str = "size-aware"

    def __post_init__(self) -> None:
        validate(self.name, PARAMS, self)

    # -- engine hooks --------------------------------------------------------------------

    def refine(self, request: RequestInfo, *, learn: bool = True) -> RequestInfo:
        """``request`` as it is (``request_info`` predicted its output); recorded in the
        window unless ``learn`` is False."""
        if learn:
            self.window.observe(request.prompt_cost, request.output_tokens)
        return request

    def on_bind(self, request: RequestInfo, backend: BackendSnapshot) -> None:
        """A request was bound to ``backend``: remember that backend's latest rate."""
        self.window.observe_rate(backend.name, backend.tokens_per_s)

    # -- scoring -------------------------------------------------------------------------

    def budget_s(self) -> float | None:
        """Seconds a request may take anywhere (None: the scorer abstains)."""
        ref = self.window.reference()
        if ref is None:
            return None
        high, fastest = ref
        return self.slack * high / fastest

    def score(self, request: RequestInfo, candidates: Sequence[BackendSnapshot]) -> list[float]:
        budget = self.budget_s()
        if budget is None:
            return [1.0] * len(candidates)
        size = request.cost_tokens
        waits = [wait_s(b) for b in candidates]
        finish = [w + size / b.tokens_per_s for b, w in zip(candidates, waits, strict=True)]
        best = min(finish)
        limit = max(self.kappa * best, budget)
        first_ok = self._first_token_ok(request, candidates, waits)
        any_slot = any(b.in_flight < b.cap for b in candidates)
        return [
            1.0 if f <= limit and ok and (b.in_flight < b.cap or not any_slot) else 0.5 * best / f
            for b, f, ok in zip(candidates, finish, first_ok, strict=True)
        ]

    def _first_token_ok(
        self, request: RequestInfo, candidates: Sequence[BackendSnapshot], waits: list[float]
    ) -> list[bool]:
        """Per candidate: would the prompt's prefill (after its wait, ``waits``) end within
        ``max(first_kappa * the soonest, first_slack * a median prompt on the slowest)``?"""
        typical = self.window.typical_first_s()
        if not typical:
            return [True] * len(candidates)
        prompt = request.prompt_cost
        first = [w + prefill_s(b, prompt) for b, w in zip(candidates, waits, strict=True)]
        limit = max(self.first_kappa * min(first), self.first_slack * typical)
        return [f <= limit for f in first]

    # -- late binding --------------------------------------------------------------------

    def precedence_s(self, request: RequestInfo) -> float:
        """Queue precedence: ``lead`` times the request's service on the fastest backend."""
        ref = self.window.reference()
        if ref is None or not self.lead:
            return 0.0
        return self.lead * request.cost_tokens / ref[1]

    def acceptable(self, request: RequestInfo, chosen: BackendSnapshot) -> bool:
        """Cheap check before ``hold_s``: True when ``chosen`` is within the budget anyway
        (and, with ``first_hold``, would prefill the prompt within ``first_slack`` median
        prompts on the slowest backend)."""
        budget = self.budget_s()
        if budget is None:
            return True
        if finish_s(chosen, request.cost_tokens) > budget:
            return False
        if not self.first_hold:
            return True
        typical = self.window.typical_first_s()
        return not typical or first_s(chosen, request.prompt_cost) <= self.first_slack * typical

    def hold_s(
        self,
        request: RequestInfo,
        chosen: BackendSnapshot,
        eligible: Sequence[BackendSnapshot],
    ) -> float:
        """Seconds ``request`` may wait for a better backend than ``chosen`` (0: bind now).

        ``eligible``: every backend that could serve it if it had room (every filter but
        ``capacity`` passed), ``chosen`` among them.
        """
        budget = self.budget_s()
        if budget is None or not eligible:
            return 0.0
        used = sum(min(b.in_flight, b.cap) for b in eligible)
        slots = sum(b.cap for b in eligible)
        if slots <= 0 or used < self.busy * slots:
            return 0.0
        size = request.cost_tokens
        finishes = [finish_s(b, size) for b in eligible]
        best_s = min(finishes)
        best = eligible[finishes.index(best_s)]
        typical = self.window.typical_first_s()
        held = 0.0
        if finish_s(chosen, size) > max(self.kappa * best_s, budget) and best.in_flight >= best.cap:
            held = self.hold * best_s
            if self.hold_first and typical:
                held = min(held, self.hold_first * typical)
        if self.first_hold and typical:
            prompt = request.prompt_cost
            firsts = [first_s(b, prompt) for b in eligible]
            soonest = min(firsts)
            first_best = eligible[firsts.index(soonest)]
            limit = max(self.first_kappa * soonest, self.first_slack * typical)
            if first_s(chosen, prompt) > limit and first_best.in_flight >= first_best.cap:
                held = max(held, self.first_hold * soonest)
        return held
