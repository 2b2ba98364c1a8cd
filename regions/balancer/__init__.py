# SPDX-License-Identifier: Apache-2.0
"""The regional balancer: a GPU-aware asyncio reverse proxy for OpenAI-compatible servers.

``app`` builds and runs it; a request goes through the stages of ``request_chain`` over
one ``http.exchange.Exchange``. Four wings, each importing only those before it:
``scheduling`` (the pool, the routing profile, admission), ``http`` (parsing, the proxy,
upstream connections, metrics, the admin listener), ``tenancy`` (identity, quotas, usage,
the residency re-check) and ``signals`` (engine scrapes, KV events, the shared state,
overflow). ``docs/architecture.md`` walks a request through them.

The names below load on first use, so that reading one plugin module (the CLI's help reads
the default profile from ``registry``) does not load the HTTP stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from regions.balancer.app import (
        Balancer,
        backends_from_region,
        build_balancer,
        serve,
    )
    from regions.balancer.config import BalancerConfig
    from regions.balancer.scheduling.admission import AdmissionConfig
    from regions.balancer.scheduling.backend import BackendSpec, OutlierConfig
    from regions.balancer.signals.shared_state import SharedStateConfig

_HOMES = {
    "AdmissionConfig": "regions.balancer.scheduling.admission",
    "BackendSpec": "regions.balancer.scheduling.backend",
    "Balancer": "regions.balancer.app",
    "BalancerConfig": "regions.balancer.config",
    "OutlierConfig": "regions.balancer.scheduling.backend",
    "SharedStateConfig": "regions.balancer.signals.shared_state",
    "backends_from_region": "regions.balancer.app",
    "build_balancer": "regions.balancer.app",
    "serve": "regions.balancer.app",
}

__all__ = [
    "AdmissionConfig",
    "BackendSpec",
    "Balancer",
    "BalancerConfig",
    "OutlierConfig",
    "SharedStateConfig",
    "backends_from_region",
    "build_balancer",
    "serve",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'regions.balancer' has no attribute '{name}'")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
