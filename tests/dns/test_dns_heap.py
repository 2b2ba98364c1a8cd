"""The server's heap settled after start-up (``director.dns.heap``): what is alive once the
maps are built is frozen out of full collections, and still freed by reference counting.
Run in a child process, so the test process's own heap stays as it is."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import gc, threading, weakref
    from director.dns.heap import settle_when_ready

    class Held:
        pass

    held = Held()
    ready = threading.Event()
    thread = settle_when_ready(ready)
    thread.join(0.2)
    assert thread.is_alive() and gc.get_freeze_count() == 0  # waits for the maps
    ready.set()
    thread.join(10)
    assert not thread.is_alive()
    frozen = gc.get_freeze_count()
    assert frozen > 10_000, frozen  # the imported modules and what they hold
    later = [Held() for _ in range(1000)]
    assert gc.get_freeze_count() == frozen  # only what was alive then
    gone = weakref.ref(held)
    del held
    assert gone() is None  # frozen, and still freed by reference counting
    print("ok", frozen)
""")


def test_the_heap_is_frozen_once_the_maps_are_ready_and_still_freed() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok")
