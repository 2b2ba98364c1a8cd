"""Each worker's heartbeat (``state.instances``): a daemon thread started once the worker
is ready, writing every ``HEARTBEAT_S`` which queues it serves; a write that fails is
skipped (the state server may be down) and never holds up a probe."""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery.signals import worker_ready

from state.errors import StateError
from state.instances import HEARTBEAT_S, this_process
from state.store import StateStore
from workers.config import WorkerSettings

log = logging.getLogger(__name__)
_stop = threading.Event()


@worker_ready.connect
def _start(sender: Any = None, **_: Any) -> None:
    app = getattr(sender, "app", None)
    settings = (app.conf.get("director_settings") if app is not None else None) \
        or WorkerSettings.from_env()
    queues = sorted(q.name for q in getattr(getattr(sender, "task_consumer", None),
                                            "queues", []) or [])
    regions = sorted({q.removeprefix("probes.") for q in queues if q.startswith("probes.")})
    instance = this_process("worker", ",".join(queues), ",".join(regions))
    threading.Thread(target=_beat, args=(settings, instance), name="heartbeat",
                     daemon=True).start()


def _beat(settings: WorkerSettings, instance: Any) -> None:
    store = StateStore.from_url(settings.redis_url, prefix=settings.state_prefix)
    while not _stop.is_set():
        try:
            store.heartbeat(instance)
        except StateError as exc:
            log.debug("worker heartbeat not written: %s", exc)
        _stop.wait(HEARTBEAT_S)
