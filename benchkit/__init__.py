# SPDX-License-Identifier: Apache-2.0
"""The benchmarks' library: what the scripts in ``bench/`` share and the tests in
``tests/benchkit/`` check. One job per module:

- ``matrix``: the routing matrix's cells (fleet, engine, trace, lengths, load);
- ``routing_trace``: trace slices at a share of a fleet's capacity, in work;
- ``shared_prompts``: Mooncake hash ids as shared-prefix prompt text;
- ``routing_client``: open-loop streaming load over HTTP;
- ``capacity``: one simulated server's sustained throughput;
- ``des``: a cell replayed in virtual time, ours against ``leastconn``;
- ``routing_matrix``: the matrix's cells, their ratios, floor and goals;
- ``routing_configs``, ``routing_procs``: the live bench's proxies and processes;
- ``fleet_sampling``: what the live bench reads from the simulators;
- ``routing_live``: one live run and one cell's table;
- ``policy_gen``: large generated policies.

It may import every package of the product; no package of the product imports it. Each
module loads on first use.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["capacity", "des", "fleet_sampling", "matrix", "policy_gen", "routing_client",
           "routing_configs", "routing_live", "routing_matrix", "routing_procs",
           "routing_trace", "shared_prompts"]


def __getattr__(name: str) -> ModuleType:
    if name not in __all__:
        raise AttributeError(f"module 'benchkit' has no attribute {name!r}")
    return importlib.import_module(f"benchkit.{name}")
