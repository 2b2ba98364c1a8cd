"""Typed records of the shared state, and their encoding as Redis hash fields.

Every record carries the wall-clock time (``time.time()``) it was measured at; readers compute
its age with :meth:`age` and decide staleness against the policy's ``stale_after`` bound.
Records are written by different machines, so ages assume clocks synchronised by NTP.
Symmetric names: ``to_fields()`` / ``from_fields()``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from state.errors import RecordError
from state.policy_identity import PolicyIdentity, policy_digest

RawHash = Mapping[bytes, bytes] | Mapping[str, str]


def _text(raw: RawHash) -> dict[str, str]:
    return {
        (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
        for k, v in raw.items()
    }


def _float(fields: dict[str, str], name: str, default: float | None = None) -> float | None:
    value = fields.get(name, "")
    if value == "":
        return default
    try:
        return float(value)
    except ValueError as exc:
        raise RecordError(f"field {name!r}: not a number: {value!r}") from exc


def _required(fields: dict[str, str], name: str) -> float:
    value = _float(fields, name)
    if value is None:
        raise RecordError(f"missing field {name!r}")
    return value


def _opt(value: float | None) -> str:
    return "" if value is None else repr(float(value))


@dataclass(frozen=True)
class HealthRecord:
    """Health of one probe target after rise/fall hysteresis.

    ``up`` is None until the first probe result. ``checked_at`` is when the last probe ran,
    ``changed_at`` when ``up`` last changed.
    """

    up: bool | None
    ok_streak: int
    fail_streak: int
    checked_at: float
    changed_at: float
    status: int | None = None
    latency_ms: float | None = None
    error: str = ""

    def age(self, now: float) -> float:
        return max(0.0, now - self.checked_at)

    @classmethod
    def from_fields(cls, raw: RawHash) -> HealthRecord:
        fields = _text(raw)
        up = fields.get("up", "")
        status = _float(fields, "status")
        return cls(
            up=None if up == "" else up == "1",
            ok_streak=int(_float(fields, "ok_streak", 0.0) or 0),
            fail_streak=int(_float(fields, "fail_streak", 0.0) or 0),
            checked_at=_required(fields, "checked_at"),
            changed_at=_float(fields, "changed_at", 0.0) or 0.0,
            status=None if status is None else int(status),
            latency_ms=_float(fields, "latency_ms"),
            error=fields.get("error", ""),
        )


@dataclass(frozen=True)
class GpuLoad:
    """Load scraped from one GPU server, normalised across engines.

    ``waiting``: requests queued; ``running``: requests in the running batch; ``cache_usage``:
    KV-cache (or token pool) usage in [0, 1], None when the engine does not report it.
    """

    engine: str
    waiting: float
    running: float
    cache_usage: float | None
    timestamp: float

    def age(self, now: float) -> float:
        return max(0.0, now - self.timestamp)

    def to_fields(self) -> dict[str, str]:
        return {
            "engine": self.engine,
            "waiting": repr(float(self.waiting)),
            "running": repr(float(self.running)),
            "cache_usage": _opt(self.cache_usage),
            "timestamp": repr(float(self.timestamp)),
        }

    @classmethod
    def from_fields(cls, raw: RawHash) -> GpuLoad:
        fields = _text(raw)
        return cls(
            engine=fields.get("engine", ""),
            waiting=_float(fields, "waiting", 0.0) or 0.0,
            running=_float(fields, "running", 0.0) or 0.0,
            cache_usage=_float(fields, "cache_usage"),
            timestamp=_required(fields, "timestamp"),
        )


@dataclass(frozen=True)
class VersionRecord:
    """What one GPU server reported of its models at ``timestamp`` (each model's
    fingerprint: its ``/v1/models`` entry's ``root``) and the models it is refused for,
    each with the reason (``workers.probes.versions``)."""

    seen: Mapping[str, str]
    refused: Mapping[str, str]
    timestamp: float

    def age(self, now: float) -> float:
        return max(0.0, now - self.timestamp)

    def to_fields(self) -> dict[str, str]:
        return {"seen": json.dumps(dict(self.seen), sort_keys=True),
                "refused": json.dumps(dict(self.refused), sort_keys=True),
                "timestamp": repr(float(self.timestamp))}

    @classmethod
    def from_fields(cls, raw: RawHash) -> VersionRecord:
        fields = _text(raw)
        return cls(seen=_text_map(fields, "seen"), refused=_text_map(fields, "refused"),
                   timestamp=_required(fields, "timestamp"))


def _text_map(fields: dict[str, str], name: str) -> dict[str, str]:
    try:
        value = json.loads(fields.get(name) or "{}")
    except ValueError as exc:
        raise RecordError(f"{name}: not JSON") from exc
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise RecordError(f"{name}: expected an object of strings")
    return value


@dataclass(frozen=True)
class RegionLoad:
    """Aggregate load of a region as its balancer publishes it (about once a second).

    ``outstanding_seconds``: estimated GPU-seconds of work admitted and not finished;
    ``capacity``: requests per second at 100%; ``utilization``: live load over capacity.
    Several balancers of one region each write theirs: ``state.region_load``.
    """

    FIELDS: ClassVar[tuple[str, ...]] = ("queue_depth", "in_flight", "outstanding_seconds",
                                         "capacity", "utilization", "timestamp")

    queue_depth: float
    in_flight: float
    outstanding_seconds: float
    capacity: float
    utilization: float
    timestamp: float

    def age(self, now: float) -> float:
        return max(0.0, now - self.timestamp)

    def to_fields(self) -> dict[str, str]:
        return {
            "queue_depth": repr(float(self.queue_depth)),
            "in_flight": repr(float(self.in_flight)),
            "outstanding_seconds": repr(float(self.outstanding_seconds)),
            "capacity": repr(float(self.capacity)),
            "utilization": repr(float(self.utilization)),
            "timestamp": repr(float(self.timestamp)),
        }

    @classmethod
    def from_fields(cls, raw: RawHash) -> RegionLoad:
        fields = _text(raw)
        return cls(
            queue_depth=_float(fields, "queue_depth", 0.0) or 0.0,
            in_flight=_float(fields, "in_flight", 0.0) or 0.0,
            outstanding_seconds=_float(fields, "outstanding_seconds", 0.0) or 0.0,
            capacity=_float(fields, "capacity", 0.0) or 0.0,
            utilization=_float(fields, "utilization", 0.0) or 0.0,
            timestamp=_required(fields, "timestamp"),
        )


@dataclass(frozen=True)
class LatencySample:
    """Round-trip time in milliseconds from a vantage (a client network, CIDR) to a region."""

    vantage: str
    region: str
    ms: float
    timestamp: float

    def age(self, now: float) -> float:
        return max(0.0, now - self.timestamp)

    def to_value(self) -> str:
        return f"{float(self.ms)!r} {float(self.timestamp)!r}"

    @classmethod
    def from_field(cls, name: str | bytes, value: str | bytes) -> LatencySample:
        name = name.decode() if isinstance(name, bytes) else name
        value = value.decode() if isinstance(value, bytes) else value
        vantage, sep, region = name.rpartition("|")
        parts = value.split()
        if not sep or len(parts) != 2:
            raise RecordError(f"latency field {name!r}={value!r}: expected 'ms timestamp'")
        try:
            return cls(vantage, region, float(parts[0]), float(parts[1]))
        except ValueError as exc:
            raise RecordError(f"latency field {name!r}={value!r}: not numbers") from exc


@dataclass(frozen=True)
class PolicyRecord:
    """The active policy's source text; ``version`` increases with every change and never
    goes back (see :mod:`state.policy_identity`).

    ``name`` is the main file's name and ``files`` the files it includes, by the path its
    ``include`` directives use, so a reader can ``load_policy_text(text, name, files)``.
    ``proofs``: digests of the engine proofs the writer ran (``director.proof_digest``); a
    malformed list reads as none, so a reader runs the proofs itself. ``epoch``: the name
    the record got when it was created (a store that lost its data starts a new one);
    ``digest``: of the sources, computed from them (the stored field only lets a poller
    compare without reading the text).
    """

    text: str
    version: int
    timestamp: float
    name: str = "policy.dp"
    files: Mapping[str, str] = field(default_factory=dict)
    proofs: tuple[str, ...] = ()
    epoch: str = ""

    @property
    def digest(self) -> str:
        return policy_digest(self.name, self.text, self.files)

    @property
    def identity(self) -> PolicyIdentity:
        return PolicyIdentity(self.version, self.digest, self.epoch)

    @classmethod
    def from_fields(cls, raw: RawHash) -> PolicyRecord:
        fields = _text(raw)
        try:
            files = json.loads(fields.get("files") or "{}")
        except ValueError as exc:
            raise RecordError(f"policy files: not JSON ({exc})") from exc
        if not isinstance(files, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in files.items()
        ):
            raise RecordError("policy files: expected an object of path -> text")
        return cls(
            text=fields.get("text", ""),
            version=int(_required(fields, "version")),
            timestamp=_required(fields, "timestamp"),
            name=fields.get("name") or "policy.dp",
            files=files,
            proofs=_proofs(fields.get("proofs")),
            epoch=fields.get("epoch", ""),
        )

    def fields(self) -> dict[str, str]:
        """The hash fields to store (``version`` and ``epoch`` are the writer's script's)."""
        return {"text": self.text, "timestamp": repr(self.timestamp), "name": self.name,
                "files": json.dumps(dict(self.files), sort_keys=True),
                "proofs": json.dumps(list(self.proofs)), "digest": self.digest}


def _proofs(value: str | None) -> tuple[str, ...]:
    try:
        proofs = json.loads(value or "[]")
    except ValueError:
        return ()
    if not isinstance(proofs, list) or not all(isinstance(p, str) for p in proofs):
        return ()
    return tuple(proofs)


def drain_value(set_at: float, until: float | None = None) -> str:
    """A drain field's value: when it was set and, for a drain with a ttl, when it ends."""
    return repr(set_at) if until is None else f"{set_at!r} until {until!r}"


def drain_until(value: str) -> float | None:
    """When the drain in a field's value ends; None for a drain without an end (also for a
    value this version cannot read: a drain stays rather than lapsing by mistake)."""
    _, sep, until = value.partition(" until ")
    if not sep:
        return None
    try:
        end = float(until)
    except ValueError:
        return None
    return end if math.isfinite(end) else None


@dataclass(frozen=True)
class DrainFlags:
    """Regions and GPU servers an operator drains: no new traffic, in-flight work finishes.

    A drain set with a ttl carries its end in the shared state; past it, readers treat the
    target as not drained whether or not the API that set it is still there to undo it.
    """

    regions: frozenset[str] = frozenset()
    gpus: frozenset[tuple[str, str]] = frozenset()

    @classmethod
    def from_fields(cls, raw: RawHash, now: float | None = None) -> DrainFlags:
        now = time.time() if now is None else now
        regions: set[str] = set()
        gpus: set[tuple[str, str]] = set()
        for name, value in _text(raw).items():
            until = drain_until(value)
            if until is not None and until <= now:
                continue
            region, sep, gpu = name.partition("/")
            if sep:
                gpus.add((region, gpu))
            else:
                regions.add(region)
        return cls(frozenset(regions), frozenset(gpus))
