# SPDX-License-Identifier: Apache-2.0
"""The balancer follows the KV-event streams of the backends that publish one
(``BackendSpec.kv_events``) into the precise prefix index (``kv_event_index``).

One ``engines.kv_event_subscriber.KvEventSubscriber`` per such backend. Its batches go to
``KvEventIndex.apply``; a batch from a connected stream marks the backend exact again. A
reset (a gap replay could not fill, a restarted publisher, a dropped connection, reported
within a second by the subscriber's socket monitor) forgets the backend's entries and marks
it inexact, so the scorer reads the approximate index for it until its stream is back.
After a reset the precise index holds only blocks stored since: it may miss hits, but
never claims a block the server lacks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from engines.kv_event_subscriber import KvEventSubscriber
from engines.kv_events import KvEvent
from regions.balancer.scheduling.backend import BackendSpec
from regions.balancer.scheduling.kv_event_index import KvEventIndex

log = logging.getLogger(__name__)


class KvEventFollow:
    """Subscribers of every publishing backend, feeding one ``KvEventIndex``."""

    def __init__(self, index: KvEventIndex, backends: Sequence[BackendSpec]) -> None:
        self.index = index
        self.subscribers: dict[str, KvEventSubscriber] = {}
        for spec in backends:
            if spec.kv_events is not None:
                self.subscribers[spec.name] = KvEventSubscriber(
                    spec.kv_events, spec.kv_events_replay,
                    on_events=self._events_of(spec.name), on_reset=self._reset_of(spec.name))

    def __bool__(self) -> bool:
        return bool(self.subscribers)

    async def start(self) -> None:
        for subscriber in self.subscribers.values():
            await subscriber.start()

    async def stop(self) -> None:
        for subscriber in self.subscribers.values():
            await subscriber.stop()

    def _events_of(self, name: str) -> Callable[[list[KvEvent]], None]:
        def on_events(events: list[KvEvent]) -> None:
            self.index.apply(name, events)
            if self.subscribers[name].healthy and not self.index.exact(name):
                self.index.resume(name)
        return on_events

    def _reset_of(self, name: str) -> Callable[[str], None]:
        def on_reset(reason: str) -> None:
            log.info("backend %s: KV events: %s; approximate prefix index until it is back",
                     name, reason)
            self.index.reset(name)
        return on_reset
