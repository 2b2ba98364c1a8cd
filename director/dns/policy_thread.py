"""A DNS worker's stored-policy follower on a control thread (``control_thread``).

``state.policy_follower`` loads each new stored version through the gate there; the policy
is handed to the worker's serving loop with ``call_soon_threadsafe``, and swapped in between
two batches of datagrams.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from director.dns.control_thread import ControlThread
from policies.model import Policy
from state.aio import AsyncStateStore
from state.policy_follower import PolicyFollower, RecordLoader
from state.policy_identity import PolicyIdentity


def policy_follower_thread(url: str, on_policy: Callable[[Policy], object],
                           loop: asyncio.AbstractEventLoop, *, load: RecordLoader,
                           initial: PolicyIdentity | None = None
                           ) -> ControlThread[PolicyFollower]:
    """Follow the policy stored at ``url`` on a thread of its own, starting from the local
    file ``initial``; ``on_policy(policy)`` runs on ``loop`` for each newer version that
    loads."""

    def hand_over(policy: Policy, _version: int) -> None:
        loop.call_soon_threadsafe(on_policy, policy)

    @contextlib.asynccontextmanager
    async def following() -> AsyncIterator[PolicyFollower]:
        store = AsyncStateStore.from_url(url)
        try:
            async with PolicyFollower(store, hand_over, load=load,
                                      initial=initial) as follower:
                yield follower
        finally:
            await store.close()

    return ControlThread("policy-follower", following)
