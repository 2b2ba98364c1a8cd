# SPDX-License-Identifier: Apache-2.0
"""Which requests an exact-match cache may answer, and the key it files them under.

Only deterministic requests: ``temperature`` 0 (written, not defaulted: OpenAI's default is
1) or an integer ``seed``, one choice (``n`` 1). Two requests share an entry only when
everything that shapes the answer is the same: the tenant, the service, the model and the
revision that would serve it, the endpoint, and the whole body (keys sorted) except
``user``, which names the end user and does not change the answer. ``stream`` is part of
the body, so a streamed answer is replayed only as a stream. Nothing is matched by
meaning.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

IGNORED = frozenset({"user"})


def deterministic(body: dict[str, Any]) -> bool:
    """Whether the body asks for an answer that does not vary between runs."""
    if body.get("n", 1) != 1 or body.get("best_of", 1) != 1:
        return False
    temperature, seed = body.get("temperature"), body.get("seed")
    greedy = isinstance(temperature, int | float) and not isinstance(temperature, bool) \
        and temperature == 0
    seeded = isinstance(seed, int) and not isinstance(seed, bool)
    return greedy or seeded


def cache_key(raw: bytes, *, tenant: str | None, service: str, model: str,
              revision: str, endpoint: str) -> str | None:
    """The key of ``raw`` (a request body), or None when it may not be cached."""
    if b'"temperature"' not in raw and b'"seed"' not in raw:
        return None
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(body, dict) or not deterministic(body):
        return None
    canonical = json.dumps({k: v for k, v in body.items() if k not in IGNORED},
                           sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    scope = json.dumps([tenant, service, model, revision, endpoint], separators=(",", ":"))
    return hashlib.sha256(scope.encode() + b"\0" + canonical.encode()).hexdigest()
