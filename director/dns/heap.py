"""The server's long-lived heap moved out of the cyclic collector's way.

The policy, the GeoIP network maps and the imported modules live as long as the process;
every full collection walks them all, a pause in answering of tens of milliseconds that
grows with them. ``settle_when_ready`` waits on a thread until the network maps are built,
collects once and freezes what is then alive (``gc.freeze``): later full collections walk
only what was allocated since. Frozen objects are still freed by reference counting.
"""

from __future__ import annotations

import gc
import logging
import threading
import time

log = logging.getLogger(__name__)


def settle(ready: threading.Event | None, timeout: float = 600.0) -> None:
    """Once ``ready`` is set (None: now), collect and freeze the heap."""
    if ready is not None and not ready.wait(timeout):
        return
    start = time.perf_counter()
    gc.collect()
    gc.freeze()
    log.info("heap settled: %d objects frozen in %.0f ms", gc.get_freeze_count(),
             (time.perf_counter() - start) * 1000)


def settle_when_ready(ready: threading.Event | None) -> threading.Thread:
    """``settle`` on a daemon thread, so that start-up goes on meanwhile."""
    thread = threading.Thread(target=settle, args=(ready,), name="heap-settle", daemon=True)
    thread.start()
    return thread
