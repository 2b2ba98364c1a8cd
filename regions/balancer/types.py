# SPDX-License-Identifier: Apache-2.0
"""Types shared by the balancer's pipeline: the parsed request, the backend view, and the
routing core's plugin kinds (filter, scorer, picker) over them.

Plugins are pure: they read a ``RequestInfo`` and ``BackendSnapshot`` values, never the
mutable pool, and never await.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from routing import plugins


class Endpoint(enum.Enum):
    COMPLETIONS = "/v1/completions"
    CHAT = "/v1/chat/completions"
    EMBEDDINGS = "/v1/embeddings"


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """What the pipeline knows about one request, parsed once from its JSON body.

    ``cost_tokens`` is the predicted work in decode-token equivalents
    (``prompt_tokens / prefill_ratio + output_tokens``); it does not depend on the backend.
    ``exclude`` names backends already tried for this request (retries).
    """

    endpoint: Endpoint
    model: str
    prompt_tokens: int
    max_tokens: int | None
    output_tokens: float
    cost_tokens: float
    stream: bool
    priority: int = 0
    session: str | None = None
    user: str | None = None
    exclude: frozenset[str] = frozenset()
    prefix: tuple[int, ...] = ()  # chained hashes of the prompt's leading blocks
    token_prefix: tuple[int, ...] = ()  # keys of its token blocks (the KV-event index)
    tenant: str | None = None  # who sent it, when the policy identifies tenants
    revision: str | None = None  # of its model, when a split chose one (``revision_split``)

    @property
    def prompt_cost(self) -> float:
        """The prompt's part of ``cost_tokens`` (``prompt_tokens / prefill_ratio``)."""
        return self.cost_tokens - self.output_tokens


@dataclass(slots=True, unsafe_hash=True)
class BackendSnapshot:
    """A view of one backend at the time the region snapshot was built; read-only.

    Not ``frozen``: the pool builds one on every lease and release (the hot path), and a
    frozen dataclass costs several times as much to build (every field goes through
    ``object.__setattr__``). Nothing writes to a view once built; a changed backend gets a
    new one.

    ``cap`` is the backend's capacity, the requests it runs at once (learned, pinned, or a
    guess while ``cap_known`` is False; reduced during slow start); ``prefetch`` how many
    requests beyond it may wait at the server itself (``limit = cap + prefetch`` is what
    admission allows: unbounded while the capacity is unknown); ``work_tokens`` the
    predicted work of its in-flight requests in decode-token equivalents, ``prefill_tokens``
    the part of it that is prompts still waiting to prefill (streamed requests without a
    first byte yet: the server prefills them before it starts anything sent later);
    ``tokens_per_s`` its learned decode rate (or the fleet's prior).

    ``ttft_ewma_s`` is the backend's time to first token (first byte of the body when not
    streamed) as an EWMA over ``ttft_samples`` samples, None before the first; it is as of
    the view's last rebuild (a lease or its release rebuilds it, so it lags by at most one
    request). ``waiting``, ``running`` and ``kv_usage`` (in [0, 1]) are the last values
    scraped from the server's metrics through the shared state, None when unknown or stale;
    ``kv_tokens`` its KV capacity where its metrics publish it.
    """

    index: int
    name: str
    models: frozenset[str]
    healthy: bool
    ejected: bool
    draining: bool
    in_flight: int
    cap: int
    work_tokens: float
    tokens_per_s: float
    rate_learned: bool
    prefetch: int = 0
    ttft_ewma_s: float | None = None
    ttft_samples: int = 0
    waiting: float | None = None
    running: float | None = None
    kv_usage: float | None = None
    prefill_tokens: float = 0.0
    cap_known: bool = True
    spt_base: float | None = None  # learned seconds per token: base + slope * concurrency
    spt_slope: float = 0.0
    kv_tokens: int | None = None  # KV cache capacity in tokens, as its metrics publish it
    revisions: tuple[tuple[str, str], ...] = ()  # (model, revision) it declares serving
    refused: tuple[tuple[str, str], ...] = ()  # (model, why) the version probe refuses

    def revision_of(self, model: str) -> str | None:
        """The revision of ``model`` it serves, as declared (None: undeclared)."""
        for name, revision in self.revisions:
            if name == model:
                return revision
        return None

    def seconds_per_token(self, concurrency: float) -> float:
        """One stream's time per token with ``concurrency`` streams there (learned; the
        plain rate's inverse until fitted)."""
        if self.spt_base is None:
            return 1.0 / self.tokens_per_s
        return self.spt_base + self.spt_slope * concurrency

    @property
    def usable(self) -> bool:
        """Healthy, not ejected, not draining: it may be given requests."""
        return self.healthy and not self.ejected and not self.draining

    @property
    def limit(self) -> int:
        return self.cap + self.prefetch

    @property
    def free_slots(self) -> int:
        return max(0, self.limit - self.in_flight)

    @property
    def outstanding_s(self) -> float:
        """Predicted seconds of in-flight work: ``work_tokens / tokens_per_s``."""
        return self.work_tokens / self.tokens_per_s


@dataclass(frozen=True, slots=True)
class RegionSnapshot:
    """Every backend of the region as of ``version``, for synchronous use.

    Each view is immutable, but ``backends`` is the pool's own list: when a backend changes,
    the pool puts a new view in its slot (and makes a new snapshot). Copying a 1,000-backend
    list on every lease and release cost a fifth of the decision time, and every reader
    (the pipeline, admission, metrics, the admin state) reads a snapshot without awaiting
    in between. Copy ``list(snapshot.backends)`` to keep views past the next lease."""

    backends: Sequence[BackendSnapshot]
    version: int

    @property
    def free_slots(self) -> int:
        return sum(
            b.free_slots for b in self.backends if b.healthy and not b.ejected and not b.draining
        )


# the routing core's plugin kinds over this tier's request and backend view
Filter = plugins.Filter[RequestInfo, BackendSnapshot]
Scorer = plugins.Scorer[RequestInfo, BackendSnapshot]
Picker = plugins.Picker[BackendSnapshot]
