"""Which processes of a deployment are alive: a heartbeat from each, in one hash.

Every DNS server, admin API, regional balancer and probe worker writes its entry in
``{p}:instances`` (field ``<role>/<name>``, a JSON object) every ``HEARTBEAT_S`` seconds:
what it is, where it serves, since when, and when it was last seen. The status page lists
them; an entry not renewed for ``GONE_S`` is shown as gone, and one gone for
``FORGET_S`` is removed by the next reader. A heartbeat that cannot be written is
skipped (the state server may be down): it never holds up what the process serves.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from state.errors import StateError

HEARTBEAT_S = 5.0
GONE_S = 3 * HEARTBEAT_S
FORGET_S = 3600.0


@dataclass(frozen=True)
class Instance:
    """One process: ``role`` (dns, api, balancer, worker), a ``name`` unique in the role,
    what it serves (``address``), its ``region`` (balancers and workers) and times."""

    role: str
    name: str
    address: str = ""
    region: str = ""
    host: str = ""
    pid: int = 0
    started_at: float = 0.0
    seen_at: float = 0.0

    @property
    def field(self) -> str:
        return f"{self.role}/{self.name}"

    def seen(self, now: float | None = None) -> Instance:
        return replace(self, seen_at=time.time() if now is None else now)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: bytes | str) -> Instance:
        data = json.loads(text)
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def status(self, now: float) -> dict[str, Any]:
        age = max(0.0, now - self.seen_at)
        return {**asdict(self), "age_s": round(age, 1),
                "state": "up" if age <= GONE_S else "gone"}


_made: Counter[str] = Counter()


def this_process(role: str, address: str = "", region: str = "") -> Instance:
    """This process as an instance of ``role``: named by what it serves (else its host) and
    pid, and by a count when the process already named one of the role (two balancers of
    one process must not share a name: their load records would overwrite each other)."""
    host = socket.gethostname()
    name = f"{address or host}#{os.getpid()}"
    _made[role] += 1
    if _made[role] > 1:
        name += f".{_made[role]}"
    return Instance(role, name, address, region, host, os.getpid(), time.time())


class Heartbeat:
    """``instance``'s heartbeat, written by ``write`` (a store's ``heartbeat``) at most
    every ``HEARTBEAT_S``: call ``beat`` on each round of a loop the process runs anyway.
    A write that fails is skipped (the loop's own next round tells the state is down)."""

    def __init__(self, instance: Instance, write: Callable[[Instance], Awaitable[None]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.instance = instance
        self._write = write
        self._clock = clock
        self._next = 0.0

    async def beat(self) -> None:
        now = self._clock()
        if now < self._next:
            return
        self._next = now + HEARTBEAT_S
        with contextlib.suppress(StateError):
            await self._write(self.instance)


def read_instances(raw: dict[bytes, bytes], now: float) -> tuple[list[Instance], list[str]]:
    """The instances of a ``{p}:instances`` hash, and the fields to forget (gone for
    ``FORGET_S``, or unreadable)."""
    found, forget = [], []
    for key, value in raw.items():
        name = key.decode() if isinstance(key, bytes) else str(key)
        try:
            instance = Instance.from_json(value)
        except (ValueError, TypeError):
            forget.append(name)
            continue
        if now - instance.seen_at > FORGET_S:
            forget.append(name)
        else:
            found.append(instance)
    found.sort(key=lambda i: (i.role, i.region, i.name))
    return found, forget
