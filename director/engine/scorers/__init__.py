"""Scorers: plugins that score candidate regions in [0, 1] (higher is better), one module per
steering method (``routing.Scorer`` over region names, for a ``DecisionContext``).

A scorer returns ``Scores`` aligned with the candidates, or ``None`` when it has no data for
this client (no measured latency, no coordinates); the picker then goes on without it, to
the next steering method.
"""

from __future__ import annotations

from collections.abc import Iterable


class Scores(tuple[float, ...]):
    """One score per candidate, in the candidates' order, with what explain says of them
    (``note``) and the client network they depend on (``scope_prefix``, 0: not on the
    client), which becomes the answer's ECS scope."""

    note: str
    scope_prefix: int

    def __new__(cls, values: Iterable[float], note: str, scope_prefix: int) -> Scores:
        scores = super().__new__(cls, values)
        scores.note = note
        scores.scope_prefix = scope_prefix
        return scores
