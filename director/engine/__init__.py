"""The global tier's decision engine: a pipeline of small plugins over regions.

Never imports ``dns.*``: the DNS server, ``director policy explain`` and the admin API all
call ``Engine.decide`` with a ``Client`` and an immutable ``Snapshot``.
"""

from director.engine.pipeline import Engine
from director.engine.snapshot import RegionState, Snapshot
from director.engine.types import Client, ClientSource, Decision, Step

__all__ = ["Client", "ClientSource", "Decision", "Engine", "RegionState", "Snapshot", "Step"]
