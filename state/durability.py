"""Whether a critical write reached a replica: Redis ``WAIT`` after it, with a bound.

Redis replicates asynchronously, so a write the master acknowledged can be lost when the
master dies before a replica has it and a Sentinel promotes that replica. Critical writes
(a policy version, a drain, a tenant key, a rollout's state) are therefore confirmed after
they are made: one pipeline reads back what was written, writes an acknowledgement key and
ends with ``WAIT <replicas> <timeout>``, which returns how many replicas hold everything
the master had taken up to that point, the write included. The read-back tells a write
that is gone (lost in a failover between the write and the confirmation) from one that is
there; a confirmation that times out is tried again (it is idempotent), and reported to
the caller as not durable when no attempt is acknowledged. Nothing is ever assumed.

The acknowledgement key is ``{p}:ack:{<key>}``: its hash tag is the written key itself,
so on Redis Cluster it lives on the written key's shard and ``WAIT`` covers that shard.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ACK_TTL_MS = 60_000
ABSENT = ""  # an expected value meaning "the field is not there" (an undrain, a revoke)


@dataclass(frozen=True)
class ReplicaAcks:
    """What a critical write waits for: ``replicas`` acknowledgements (0: none, a store
    without replicas), each confirmation bounded by ``timeout_ms``, tried ``attempts``
    times."""

    replicas: int = 0
    timeout_ms: int = 500
    attempts: int = 2

    def __post_init__(self) -> None:
        if self.replicas < 0 or self.timeout_ms < 1 or self.attempts < 1:
            raise ValueError(f"replica acknowledgements: bad setting {self}")


@dataclass(frozen=True)
class Durability:
    """What became of one critical write: ``acknowledged`` replicas of the ``wanted``;
    ``present`` is False when the write was no longer on the master (lost in a failover)."""

    acknowledged: int
    wanted: int
    present: bool = True
    attempts: int = 0

    @property
    def durable(self) -> bool:
        return self.present and self.acknowledged >= self.wanted

    def to_json(self) -> dict[str, Any]:
        return {"durable": self.durable, "replicas_acknowledged": self.acknowledged,
                "replicas_wanted": self.wanted, "present": self.present}

    def describe(self) -> str:
        if not self.present:
            return "lost: the master no longer holds it (a failover came between)"
        if self.durable:
            return f"durable: {self.acknowledged} of {self.wanted} replica(s) acknowledged"
        return (f"not durable: {self.acknowledged} of {self.wanted} replica(s) acknowledged "
                f"after {self.attempts} attempt(s); a failover now could lose it")


NOT_ASKED = Durability(0, 0)  # a store with no replicas to wait for


@dataclass(frozen=True)
class Expected:
    """What a write left in one hash: field -> value (``ABSENT``: no such field)."""

    key: str
    fields: Mapping[str, str]


def ack_key(prefix: str, key: str) -> str:
    return f"{prefix}:ack:{{{key}}}"


def queue_confirmation(pipe: Any, prefix: str, expected: Expected, acks: ReplicaAcks) -> None:
    """Queue one confirmation on a non-transactional pipeline (sync or asyncio): the
    read-back, the acknowledgement key, the ``WAIT``; read its replies with ``judge``."""
    pipe.hmget(expected.key, list(expected.fields))
    pipe.set(ack_key(prefix, expected.key), secrets.token_hex(8), px=ACK_TTL_MS)
    pipe.execute_command("WAIT", acks.replicas, acks.timeout_ms)


def judge(replies: list[Any], expected: Expected, acks: ReplicaAcks, attempt: int
          ) -> Durability:
    """The durability the replies of ``queue_confirmation`` show."""
    values, _, acknowledged = replies[-3:]
    present = all(_matches(value, want) for value, want in
                  zip(values, expected.fields.values(), strict=True))
    return Durability(int(acknowledged), acks.replicas, present, attempt)


def _matches(value: bytes | str | None, want: str) -> bool:
    if want == ABSENT:
        return value is None
    if isinstance(value, bytes):
        value = value.decode()
    return value == want
