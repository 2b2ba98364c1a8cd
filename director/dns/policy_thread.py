"""A DNS worker's stored-policy follower, on a thread of its own.

The worker's event loop answers UDP in batches of up to 64 datagrams, four batches a
callback. A follower task on that loop waits behind them at every step: the change
channel's message, the version, the record, the hand-off from the gate's thread. At 50k
queries a second that is a few milliseconds a step. On a thread with its own event loop,
each step waits only for the interpreter lock, which the serving loop gives up at every
batch's system calls. The policy the follower loads (``state.policy_follower``, through the
gate) is handed to the worker's loop, which swaps it in between two batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from types import TracebackType

from policies.model import Policy
from state.aio import AsyncStateStore
from state.policy_follower import PolicyFollower, RecordLoader

log = logging.getLogger(__name__)


class PolicyFollowerThread:
    """``PolicyFollower`` of the policy stored at ``url`` on a daemon thread; calls
    ``on_policy(policy)`` on ``loop`` for each new version that loads. An async context
    manager, entered and left on ``loop``."""

    def __init__(self, url: str, on_policy: Callable[[Policy], object],
                 loop: asyncio.AbstractEventLoop, *, load: RecordLoader) -> None:
        self.url = url
        self.on_policy = on_policy
        self.loop = loop
        self.load = load
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._main, name="policy-follower", daemon=True)
        self._own_loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    def _main(self) -> None:
        try:
            asyncio.run(self._follow())
        except Exception:  # the worker serves on with the policy it has
            log.exception("policy follower thread failed; the last good policy keeps serving")
        finally:
            self._started.set()

    async def _follow(self) -> None:
        self._own_loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        store = AsyncStateStore.from_url(self.url)
        try:
            async with PolicyFollower(store, self._hand_over, load=self.load):
                self._started.set()
                await self._stop.wait()
        finally:
            await store.close()

    def _hand_over(self, policy: Policy, _version: int) -> None:
        self.loop.call_soon_threadsafe(self.on_policy, policy)

    async def __aenter__(self) -> PolicyFollowerThread:
        self._thread.start()
        await asyncio.to_thread(self._started.wait, 10.0)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        own_loop, stop = self._own_loop, self._stop
        if own_loop is not None and stop is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # its loop has closed already
                own_loop.call_soon_threadsafe(stop.set)
        await asyncio.to_thread(self._thread.join, 5.0)
