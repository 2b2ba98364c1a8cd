# SPDX-License-Identifier: Apache-2.0
"""A vLLM-like, OpenAI-compatible GPU server simulator (see README.md).

``engine`` models continuous batching over an injectable clock; ``server`` is the aiohttp
app; ``fleet`` runs one or many servers; ``python -m regions.simulator`` runs one as its own
process.
"""

from regions.simulator.config import EngineConfig
from regions.simulator.faults import Fault, FaultMode
from regions.simulator.fleet import Fleet, ServerSpec, SimServer

__all__ = ["EngineConfig", "Fault", "FaultMode", "Fleet", "ServerSpec", "SimServer"]
