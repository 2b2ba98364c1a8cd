# SPDX-License-Identifier: Apache-2.0
"""Learned output lengths: how long an answer will be, from the answers already relayed.

``max_tokens`` is a cap, not a length: a chat service sends the same cap with every request
(the Azure conversation trace: a cap of 1,000, answers of 211 tokens on average), while a
client that knows its answer size declares it exactly (vLLM's ``benchmark_serving``
replaying a trace). And the prompt says something about the answer: in the Azure
conversation trace prompts of 512-2,047 tokens get answers of ~350 tokens on average, the
others ~100.

So per model this learns the share of its cap an answer fills, ``output / max_tokens``,
as EWMAs (a plain mean over the first ``1 / alpha`` answers) keyed by the request's prompt
and cap sizes in octaves (``floor(log2 tokens)``), the prompt's also in quarters of an
octave, most specific first::

    (prompt quarter, cap octave) -> (prompt octave, cap octave) -> (cap octave) -> (any cap)

and, for requests without a cap, the mean output per prompt quarter, then prompt octave,
then model. Quarters because answer lengths change within an octave: in the Azure trace
prompts of 768-1,023 and 1,024-1,279 tokens get ~400-token answers, those of 1,536-2,047
~90, and one mean per octave (~340 for 1,024-2,047) puts both at once in the wrong place.
``predict`` answers from the most specific key that has ``min_samples`` answers: with
exact caps every share is ~1 and a request's prediction is its own cap; with one cap for
all, it is that prompt octave's mean answer. Nothing learned yet: None (the caller falls
back to ``max_tokens``). At most ``max_keys`` keys per table; a new key past that is not
learned (its fallbacks still are).
"""

from __future__ import annotations

from dataclasses import dataclass, field

ANY = -1  # the octave of a fallback key that does not condition on that size


def octave(tokens: int) -> int:
    """``floor(log2 tokens)``, 0 for anything below 2."""
    return max(0, int(tokens).bit_length() - 1)


def quarter(tokens: int) -> int:
    """Which quarter of its octave ``tokens`` lies in (0-3; the two bits after the
    leading one), 0 below 4."""
    o = octave(tokens)
    return (int(tokens) >> (o - 2)) & 3 if o >= 2 else 0


@dataclass
class OutputLengths:
    alpha: float = 0.05
    min_samples: int = 8
    max_keys: int = 4096
    # key -> [ewma, samples]; shares: (model, prompt oct[, quarter], cap oct);
    # means: (model, prompt oct[, quarter])
    # keys: (model, prompt octave[, prompt quarter-octave], cap octave) and coarser ones
    _shares: dict[tuple[str | int, ...], list[float]] = field(default_factory=dict, repr=False)
    _means: dict[tuple[str | int, ...], list[float]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.alpha <= 1 or self.min_samples < 1 or self.max_keys < 1:
            raise ValueError(
                f"output lengths: need 0 < alpha <= 1, min_samples >= 1, max_keys >= 1; got "
                f"{self.alpha}, {self.min_samples}, {self.max_keys}"
            )

    def observe(self, model: str, prompt_tokens: int, max_tokens: int | None, output: int) -> None:
        """One finished answer of ``output`` tokens."""
        p, q = octave(prompt_tokens), quarter(prompt_tokens)
        self._update(self._means, (model, p, q), output)
        self._update(self._means, (model, p), output)
        self._update(self._means, (model, ANY), output)
        if max_tokens:
            c = octave(max_tokens)
            share = min(1.0, output / max_tokens)
            self._update(self._shares, (model, p, q, c), share)
            self._update(self._shares, (model, p, c), share)
            self._update(self._shares, (model, ANY, c), share)
            self._update(self._shares, (model, ANY, ANY), share)

    def predict(self, model: str, prompt_tokens: int, max_tokens: int | None) -> float | None:
        """Expected output tokens of a request, or None while nothing fits was learned."""
        p, q = octave(prompt_tokens), quarter(prompt_tokens)
        if max_tokens:
            c = octave(max_tokens)
            capped: tuple[tuple[str | int, ...], ...] = (
                (model, p, q, c), (model, p, c), (model, ANY, c), (model, ANY, ANY))
            for key in capped:
                share = self._learned(self._shares, key)
                if share is not None:
                    return share * max_tokens
            return None
        uncapped: tuple[tuple[str | int, ...], ...] = ((model, p, q), (model, p), (model, ANY))
        for key in uncapped:
            mean = self._learned(self._means, key)
            if mean is not None:
                return mean
        return None

    def _learned(self, table: dict, key: tuple) -> float | None:
        entry = table.get(key)
        if entry is None or entry[1] < self.min_samples:
            return None
        return entry[0]

    def _update(self, table: dict, key: tuple, sample: float) -> None:
        entry = table.get(key)
        if entry is None:
            if len(table) >= self.max_keys:
                return
            table[key] = [float(sample), 1]
            return
        entry[1] += 1
        # a plain mean over the first 1/alpha answers: an EWMA seeded with the first answer
        # would lean on it for long, and the first answers to arrive are the short ones
        entry[0] += max(self.alpha, 1.0 / entry[1]) * (sample - entry[0])
