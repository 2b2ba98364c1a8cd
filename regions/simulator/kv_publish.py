# SPDX-License-Identifier: Apache-2.0
"""A simulated server publishes its prefix cache's changes as vLLM does with
``--kv-events-config``: ``BlockStored`` / ``BlockRemoved`` batches on a ZeroMQ PUB socket,
with a replay socket (``engines.kv_event_publisher``, wire format ``engines.kv_events``).

One batch per engine iteration that changed the cache, as vLLM publishes the events its
scheduler collected in a step. Stored blocks carry their token ids (``engines.sim_tokens``)
so that a router can key them by content; the hashes are the server's own.
"""

from __future__ import annotations

from collections.abc import Sequence

from engines.kv_event_publisher import KvEventPublisher
from engines.kv_events import BlockRemoved, BlockStored, KvEvent
from regions.simulator.batching import KvEvent as CacheChange
from regions.simulator.batching import StoredBlocks

MEDIUM = "GPU"


def wire_events(changes: Sequence[CacheChange]) -> list[KvEvent]:
    """The scheduler's cache changes as vLLM's KV events."""
    events: list[KvEvent] = []
    for change in changes:
        if isinstance(change, StoredBlocks):
            events.append(BlockStored(change.hashes, change.parent, change.token_ids,
                                      change.block_size, None, MEDIUM, None))
        else:
            events.append(BlockRemoved(change.hashes, MEDIUM))
    return events


class KvPublish:
    """The engine's KV event sink: a publisher once ``open`` (inside the running loop)."""

    def __init__(self, endpoint: str, replay_endpoint: str | None = None) -> None:
        self.endpoint = endpoint
        self.replay_endpoint = replay_endpoint
        self.publisher: KvEventPublisher | None = None

    def open(self) -> None:
        if self.publisher is None:
            self.publisher = KvEventPublisher(self.endpoint, self.replay_endpoint)

    def close(self) -> None:
        if self.publisher is not None:
            self.publisher.close()
            self.publisher = None

    def __call__(self, changes: list[CacheChange]) -> None:
        if self.publisher is not None:
            self.publisher.publish(wire_events(changes))
