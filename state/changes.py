"""Listening to the shared state's change channel, the one way every follower does it.

Writers publish the key they changed on ``Keys.changes`` (``state.store``). A follower
subscribes, is told each changed key, and after every (re)subscription is told to catch up
(messages published while it was away are lost). Any failure backs off (doubling from
``min_delay`` to ``max_delay`` seconds) and subscribes again; cancellation ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from state.aio import AsyncStateStore


async def listen_for_changes(store: AsyncStateStore, on_key: Callable[[str], None], *,
                             on_subscribed: Callable[[], None],
                             on_error: Callable[[Exception], None],
                             min_delay: float = 0.1, max_delay: float = 2.0) -> None:
    """Call ``on_key(key)`` for every key published on ``store``'s change channel,
    ``on_subscribed()`` after each subscription, ``on_error(exc)`` before each retry;
    runs until cancelled."""
    delay = min_delay
    while True:
        pubsub = store.subscribe()
        try:
            await pubsub.subscribe(store.keys.changes)
            on_subscribed()
            delay = min_delay
            while True:
                message = await pubsub.get_message(timeout=1.0)
                if message is not None and message.get("type") == "message":
                    data = message["data"]
                    on_key(data.decode() if isinstance(data, bytes) else str(data))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # any failure: report, back off, resubscribe
            on_error(exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_delay)
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()
