# SPDX-License-Identifier: Apache-2.0
"""Fault switches for drills, set at run time through ``POST /_sim/fault``.

Body: ``{"mode": "none"|"fail"|"slow"|"hang"|"error5xx"|"short"|"stall"|"late", "factor": 3.0,
"rate": 1.0,
"status": 503, "ttl": 30}``; every field is validated, and those a mode does not use have no
effect. With ``ttl`` (seconds) the server reverts to healthy by itself after that long, unless
another fault is set first: a drill's fault ends even if whoever set it is gone.

- ``none``: healthy.
- ``fail``: the server is down: in-flight requests are cut (connection reset) and every
  route except ``/_sim/*`` answers 503, ``/health`` included. (To refuse TCP connections
  outright, stop the server: ``SimServer.stop()``.)
- ``slow``: every prefill and decode step takes ``factor`` times longer (default 3.0).
- ``hang``: requests are accepted (streams even get their 200 headers) but no token is ever
  produced, and ``/health`` stays 200: a gray failure. Work resumes when the mode changes.
- ``error5xx``: a ``rate`` share (default 1.0) of inference requests is answered with a
  500 or 503 before any work; ``status`` pins the code, otherwise each pick is random
  (from the server's seeded generator).
- ``short``: a bad revision that answers too little: each answer is cut to ``factor``
  (default 0.3, at most 1) of the tokens it would have had, and ends with finish reason
  ``stop`` instead of ``length``.
- ``late``: a ``rate`` share (default 1.0) of streamed answers holds its first token back
  until ``factor`` (default 3.0) times the time it took (a stall in front of the engine:
  a tokenizer or scheduler hiccup, a KV transfer wait); the rest streams as usual.
- ``stall``: a ``rate`` share (default 1.0) of streamed answers stops after a random
  number of its tokens (at least one, never the last): the connection stays open and no
  byte follows, as when a worker hangs mid-answer. The sequence is aborted on the engine,
  so its slot is freed; the stream stays silent until its client closes it.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass
from typing import Any

from regions.simulator.errors import FaultSpecError


class FaultMode(enum.Enum):
    NONE = "none"
    FAIL = "fail"
    SLOW = "slow"
    HANG = "hang"
    ERROR5XX = "error5xx"
    SHORT = "short"  # answers cut to ``factor`` of their tokens, ending "stop": a bad revision
    STALL = "stall"  # a ``rate`` share of streams goes silent mid-answer
    LATE = "late"  # a ``rate`` share of streams sends its first token ``factor`` x late


_ERROR_STATUSES = (500, 503)
SHORT_FACTOR = 0.3
MAX_TTL_S = 86_400.0


@dataclass(frozen=True)
class Fault:
    """One fault setting; ``Fault()`` is healthy."""

    mode: FaultMode = FaultMode.NONE
    factor: float = 3.0
    rate: float = 1.0
    status: int | None = None
    ttl: float | None = None  # seconds until the server reverts to healthy by itself

    @classmethod
    def from_json(cls, body: Any) -> Fault:
        """Parse a ``/_sim/fault`` body; ``FaultSpecError`` names the offending field."""
        if not isinstance(body, dict):
            raise FaultSpecError("fault: expected a JSON object")
        raw_mode = body.get("mode", "none")
        try:
            mode = FaultMode(raw_mode)
        except ValueError:
            expected = ", ".join(m.value for m in FaultMode)
            raise FaultSpecError(
                f"fault.mode: unknown mode {raw_mode!r} (expected one of {expected})"
            ) from None
        factor = _number(body, "factor", SHORT_FACTOR if mode is FaultMode.SHORT else cls.factor)
        if not factor > 0:
            raise FaultSpecError(f"fault.factor: must be > 0, got {factor!r}")
        if mode is FaultMode.SHORT and factor > 1:
            raise FaultSpecError(f"fault.factor: a short answer's share of its tokens must be "
                                 f"<= 1, got {factor!r}")
        rate = _number(body, "rate", cls.rate)
        if not 0.0 <= rate <= 1.0:
            raise FaultSpecError(f"fault.rate: must be within [0, 1], got {rate!r}")
        status = body.get("status")
        if status is not None and status not in _ERROR_STATUSES:
            raise FaultSpecError(f"fault.status: must be 500 or 503, got {status!r}")
        ttl = body.get("ttl")
        if ttl is not None:
            ttl = _number(body, "ttl", 0.0)
            if not 0 < ttl <= MAX_TTL_S:
                raise FaultSpecError(f"fault.ttl: must be within (0, {MAX_TTL_S:g}] s, got {ttl!r}")
        return cls(mode, float(factor), float(rate), status, ttl)

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode.value,
            "factor": self.factor,
            "rate": self.rate,
            "status": self.status,
            "ttl": self.ttl,
        }

    def injected_error(self, rng: random.Random) -> int | None:
        """For ``error5xx``: the status to answer this request with, or None to serve it."""
        if self.mode is not FaultMode.ERROR5XX or rng.random() >= self.rate:
            return None
        return self.status if self.status is not None else rng.choice(_ERROR_STATUSES)

    def first_token_factor(self, rng: random.Random) -> float:
        """For ``late``: how many times its natural time this stream's first token takes."""
        if self.mode is not FaultMode.LATE or rng.random() >= self.rate:
            return 1.0
        return self.factor

    def stall_after(self, rng: random.Random, output_tokens: int) -> int | None:
        """For ``stall``: after how many of its ``output_tokens`` this stream goes silent
        (1 to ``output_tokens - 1``), or None to stream it whole."""
        if self.mode is not FaultMode.STALL or output_tokens < 2 or rng.random() >= self.rate:
            return None
        return rng.randint(1, output_tokens - 1)


def _number(body: dict[str, Any], key: str, default: float) -> float:
    value = body.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FaultSpecError(f"fault.{key}: expected a number, got {value!r}")
    return float(value)
