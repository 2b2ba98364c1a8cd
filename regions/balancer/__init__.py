# SPDX-License-Identifier: Apache-2.0
"""The regional balancer: a GPU-aware asyncio reverse proxy for OpenAI-compatible servers.

``app`` builds and runs it; ``proxy`` is the data path; ``admission`` binds requests to
backends (late binding through a priority queue, shedding with Retry-After);
``backends`` holds the pool, in-flight accounting, ejection and slow start; ``pipeline``
runs the ``filters``, ``scorers`` and ``pickers`` over a frozen snapshot.

The names below load on first use, so that reading one plugin module (the CLI's help reads
the default profile from ``registry``) does not load the HTTP stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from regions.balancer.admission import AdmissionConfig
    from regions.balancer.app import (
        Balancer,
        BalancerConfig,
        backends_from_region,
        build_balancer,
        serve,
    )
    from regions.balancer.backends import BackendSpec, OutlierConfig
    from regions.balancer.shared_state import SharedStateConfig

_HOMES = {
    "AdmissionConfig": "regions.balancer.admission",
    "BackendSpec": "regions.balancer.backends",
    "Balancer": "regions.balancer.app",
    "BalancerConfig": "regions.balancer.app",
    "OutlierConfig": "regions.balancer.backends",
    "SharedStateConfig": "regions.balancer.shared_state",
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
