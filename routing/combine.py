# SPDX-License-Identifier: Apache-2.0
"""How pickers combine the scorers' columns: a weighted sum, or lexicographic order."""

from __future__ import annotations

from collections.abc import Sequence

from routing.plugins import Column


def weighted_totals(columns: Sequence[Column], n: int) -> list[float]:
    """``sum(weight * value)`` per candidate over the columns that have data, added left to
    right from the first column's product: ``((w0 * a + w1 * b) + w2 * c)``, the same
    floats as a running total from the first term. One pass for up to three columns."""
    scored = [(values, weight) for values, weight in columns if values is not None]
    if not scored:
        return [0.0] * n
    if len(scored) == 1:
        [(a, wa)] = scored
        return [wa * x for x in a]
    if len(scored) == 2:
        (a, wa), (b, wb) = scored
        return [wa * x + wb * y for x, y in zip(a, b, strict=False)]
    (a, wa), (b, wb), (c, wc) = scored[:3]
    totals = [wa * x + wb * y + wc * z for x, y, z in zip(a, b, c, strict=False)]
    for values, weight in scored[3:]:
        totals = [t + weight * v for t, v in zip(totals, values, strict=False)]
    return totals


def lexicographic_order(columns: Sequence[Column], n: int) -> list[int]:
    """Indices ordered by the columns that have data, first column first (a later column
    only breaks ties of the earlier ones), then by position; weights are not used."""
    scored = [values for values, _ in columns if values is not None]
    return sorted(range(n), key=lambda i: ([-values[i] for values in scored], i))
