"""A DNS worker's control plane (the state refresher, the stored-policy follower) on a
thread with an event loop of its own.

The worker's event loop answers UDP in batches of up to 64 datagrams, four batches a
callback. A task on that loop waits behind them at every step: a change channel's
message, each read from the store, the hand-off from the gate's thread. At 50k queries a
second that is a few milliseconds a step. On a thread with its own loop, each step waits
only for the interpreter lock, which the serving loop gives up at every batch's system
calls. What the control plane produces reaches the serving side as one reference (the
refresher's ``current`` snapshot) or through ``call_soon_threadsafe`` (a loaded policy).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
START_TIMEOUT = 30.0  # seconds for the context to be entered (a first read of the store)


class ControlThread(Generic[T]):
    """Enters ``make()`` (an async context manager) on a daemon thread's own event loop
    and leaves it when this is left. Itself an async context manager, entered and left on
    the serving loop; entering gives what ``make()`` entered as."""

    def __init__(self, name: str, make: Callable[[], AbstractAsyncContextManager[T]]) -> None:
        self.make = make
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._started = threading.Event()
        self._value: T | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    def call(self, function: Callable[..., Any], *args: Any) -> None:
        """Run ``function(*args)`` on the control thread's loop (from any thread)."""
        if self._loop is None:
            raise RuntimeError(f"{self.thread.name}: not running")
        self._loop.call_soon_threadsafe(function, *args)

    def _main(self) -> None:
        try:
            asyncio.run(self._hold())
        except Exception:  # the worker serves on with what it has
            log.exception("%s: stopped; the worker serves on with its last state",
                          self.thread.name)
        finally:
            self._started.set()

    async def _hold(self) -> None:
        self._stop = asyncio.Event()
        self._loop = asyncio.get_running_loop()  # from now on ``__aexit__`` can stop it
        async with self.make() as value:
            self._value = value
            self._started.set()
            await self._stop.wait()

    async def __aenter__(self) -> T:
        self.thread.start()
        await asyncio.to_thread(self._started.wait, START_TIMEOUT)
        if self._value is None:  # failed, or still entering: it leaves once it has entered
            await self.__aexit__(None, None, None)
            raise RuntimeError(f"{self.thread.name}: did not start (see the log)")
        return self._value

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and self.thread.is_alive():
            with contextlib.suppress(RuntimeError):  # its loop has closed already
                loop.call_soon_threadsafe(stop.set)
        await asyncio.to_thread(self.thread.join, 5.0)
