"""The limits an engine publishes on its info endpoint, read into ``EngineLimits``.

- SGLang ``GET /v1/loads``: one object per data-parallel rank under ``loads``, each with
  ``max_running_requests`` (the slot count) and ``max_total_num_tokens`` (KV pool);
  summed over ranks.
- TGI ``GET /info``: ``max_concurrent_requests`` (default 128), a semaphore held for the
  whole life of a request, queued or running: above it TGI answers 429. An upper bound on
  what may be in flight there, not its batch size (that is dynamic).
- vLLM publishes no slot count (``max_num_seqs`` is in no metric; ``/server_info`` needs
  its development mode); its KV capacity is on the metrics page (``engines.metrics``).
- Triton: nothing on an info endpoint.

See ``docs/research/engine-capacity-signals.md`` for the sources.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engines.errors import EngineDataError

INFO_PATHS: Mapping[str, str] = {"sglang": "/v1/loads", "tgi": "/info"}


@dataclass(frozen=True)
class EngineLimits:
    """What an engine says bounds it; None: it does not say."""

    max_running: int | None = None  # sequence slots (requests decoded together)
    max_in_flight: int | None = None  # requests accepted at once, queued or running
    kv_tokens: int | None = None  # KV cache capacity in tokens


def limits_from_info(engine: str, document: Any) -> EngineLimits:
    """``engine``'s limits from the JSON its info endpoint (``INFO_PATHS``) returned."""
    if not isinstance(document, Mapping):
        raise EngineDataError(f"engine {engine}: info is not a JSON object")
    if engine == "sglang":
        loads = document.get("loads")
        if not isinstance(loads, list) or not loads:
            raise EngineDataError("sglang: /v1/loads has no 'loads' list")
        return EngineLimits(max_running=_sum(loads, "max_running_requests"),
                            kv_tokens=_sum(loads, "max_total_num_tokens"))
    if engine == "tgi":
        return EngineLimits(max_in_flight=_positive(document.get("max_concurrent_requests")))
    return EngineLimits()


def _sum(items: list[Any], key: str) -> int | None:
    values = [_positive(item.get(key)) if isinstance(item, Mapping) else None for item in items]
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


def _positive(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    return int(value)
