"""The writes both stores make, queued on a pipeline of either flavour.

Queuing a command is the same call on a ``redis`` and a ``redis.asyncio`` pipeline; only
``execute()`` differs (awaited or not). So each write is written once here, and
:class:`~state.store.StateStore` and :class:`~state.aio.AsyncStateStore` each run it their
own way. A write that changes what readers derive from it publishes the key on
``Keys.changes`` in the same pipeline.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from state.durability import ABSENT, Expected
from state.hysteresis import script_args
from state.keys import Keys, drain_field
from state.records import drain_value
from state.region_load import SourcedLoad


class Pipeline(Protocol):
    """What queuing needs of a pipeline (sync or asyncio)."""

    def hset(self, name: str, key: str | None = None, value: Any = None,
             mapping: Any = None) -> Any: ...

    def hdel(self, name: str, *keys: str) -> Any: ...

    def publish(self, channel: str, message: str) -> Any: ...


def queue_region_load(pipe: Pipeline, keys: Keys, region: str, record: SourcedLoad) -> None:
    """One balancer's record of its region's load (``state.region_load``), published."""
    key = keys.region_load(region)
    pipe.hset(key, *record.to_field())
    pipe.publish(keys.changes, key)


def queue_drain(pipe: Pipeline, keys: Keys, region: str, gpu: str | None, *, draining: bool,
                now: float | None, until: float | None) -> Expected:
    """Drain (or undrain) a region or one of its GPU servers, published; a drain with
    ``until`` (wall clock) ends then for every reader. Returns what it leaves, to confirm."""
    name = drain_field(region, gpu)
    value = ABSENT
    if draining:
        value = drain_value(time.time() if now is None else now, until)
        pipe.hset(keys.drain, name, value)
    else:
        pipe.hdel(keys.drain, name)
    pipe.publish(keys.changes, keys.drain)
    return Expected(keys.drain, {name: value})


def policy_written(keys: Keys, version: int, epoch: str) -> Expected:
    """What storing policy ``version`` of ``epoch`` leaves, to confirm."""
    return Expected(keys.policy, {"version": str(version), "epoch": epoch})


def probe_call(keys: Keys, region: str, gpu: str | None, *, ok: bool, rise: int, fall: int,
               now: float | None, probe_id: str, status: int | None, latency_ms: float | None,
               error: str, endpoint: str | None = None) -> tuple[list[str], list[str]]:
    """The keys and arguments of the hysteresis script for one probe result (of the
    balancer at one of the region's endpoints when ``endpoint`` is given)."""
    args = script_args(
        ok=ok,
        rise=rise,
        fall=fall,
        now=time.time() if now is None else now,
        probe_id=probe_id,
        status=status,
        latency_ms=latency_ms,
        error=error,
        channel=keys.changes,
    )
    key = keys.endpoint_health(region, endpoint) if endpoint else keys.health(region, gpu)
    return [key], args
