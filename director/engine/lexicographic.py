"""The global tier's picker: steering methods in the order the service lists them.

Candidates are ordered by the tuple of available scores, first method first (a later
method only breaks ties of the earlier ones; a method without data is left out), then by
policy order (``routing.combine.lexicographic_order``). Weights are not used.
"""

from __future__ import annotations

from collections.abc import Sequence

from routing import Column, lexicographic_order


class LexicographicPicker:
    name = "lexicographic"

    def order(self, candidates: Sequence[str], columns: Sequence[Column]) -> Sequence[int]:
        return lexicographic_order(columns, len(candidates))
