"""What inference engines (vLLM, SGLang, TGI, Triton) publish about their load, limits and
KV cache, read into engine-neutral values. Imports no other package of ours.

- ``metrics``: a Prometheus ``/metrics`` page -> ``EngineLoad`` (waiting, running, cache
  usage) and, where the page has them, the KV capacity (vLLM's ``cache_config_info``) and
  the generated-token counter;
- ``limits``: the engines' info endpoints -> ``EngineLimits`` (slot and in-flight limits);
- ``kv_events``: vLLM's KV-cache event batches (msgpack) <-> ``EventBatch``; the only
  modules here with I/O are their ZeroMQ ``kv_event_publisher`` and
  ``kv_event_subscriber``;
- ``sim_tokens``: the simulated servers' tokenizer.

Sources: ``docs/research/engine-capacity-signals.md``.
"""

from engines.errors import EngineDataError
from engines.limits import INFO_PATHS, EngineLimits, limits_from_info
from engines.metrics import ENGINES, EngineLoad, detect_engine, parse_load, samples_by_name

__all__ = [
    "ENGINES",
    "INFO_PATHS",
    "EngineDataError",
    "EngineLimits",
    "EngineLoad",
    "detect_engine",
    "limits_from_info",
    "parse_load",
    "samples_by_name",
]
