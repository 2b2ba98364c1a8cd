# SPDX-License-Identifier: Apache-2.0
"""The regional balancer: a GPU-aware asyncio reverse proxy for OpenAI-compatible servers.

``app`` builds and runs it; ``proxy`` is the data path; ``admission`` binds requests to
backends (late binding through a priority queue, shedding with Retry-After);
``backends`` holds the pool, in-flight accounting, ejection and slow start; ``pipeline``
runs the ``filters``, ``scorers`` and ``pickers`` over a frozen snapshot.
"""

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
