"""Exception tree::

    EngineDataError (ValueError)   a page or document is not what the engine publishes
        KvEventDecodeError         a KV-event payload is not what vLLM sends (kv_events)
"""

from __future__ import annotations


class EngineDataError(ValueError):
    """A metrics page is not Prometheus text or lacks the engine's metrics; an info
    document is not the JSON the engine publishes."""
