"""The rollout controller: a candidate revision of a model takes a growing share of its
traffic, step by step, in the regions of the rollout, while analysis gates compare its
answers with the baseline's over each step's window; a failed gate rolls it back at once.

A rollout lives in the shared state (``Keys.rollouts``), so it survives an API restart and
any API instance may drive it (one at a time: ``tick`` runs under a short lock). Each step
writes the split ``baseline 100-p %, candidate p %`` to every region of the rollout
(``Keys.split``; the balancers apply it through the change channel) and reads the
revisions' cumulative answer counts there (``Keys.outcomes``) as its window's start.

On each ``tick``:

- every gate is judged on the window so far; a failure rolls back at once (the split back
  to the baseline everywhere), whatever the time, also while the rollout is paused (a
  paused candidate still serves its share);
- once the step's interval is over, all gates passing moves to the next step (the last,
  100 %, completes the rollout; as the baseline gets no traffic then, the candidate is
  judged against the baseline's window of the step before); an inconclusive window (too
  few samples) is extended by another interval, and after ``max_inconclusive`` extensions
  the rollout pauses: too little traffic to judge is not a pass.

``pause`` holds the split where it is, ``resume`` starts the step's window again, ``abort``
rolls back. Every transition is kept in the rollout's history; the controller's own (a
step, a rollback, a completion, a pause for want of samples) are audited as ``controller``
(the operator's are audited by the API route that made them). The split of a
completed rollout stays in the shared state (100 % candidate) until the policy says the
same and the rollout is cleared (``clear``), or another rollout of the model replaces it.
Blue-green is a rollout of one step (100 %) with ``require_ready``: it starts only when
every server of the candidate in its regions is up by its probes and not drained, and it
is judged against what the baseline served before the switch (its counts since the
balancers started); ``abort`` is the instant rollback.
Residency is untouched: a split only chooses among the servers of one region, after the
region was chosen for the client.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from director.rollouts.gates import DEFAULT_GATES, Gate, Verdict, judge_all
from policies.model import Policy
from state.aio import AsyncStateStore
from state.durability import Durability, Expected
from state.errors import RecordError
from state.guard import describe, redis_errors
from state.outcomes import Outcomes, parse_outcome_field
from state.records import HealthRecord

log = logging.getLogger(__name__)

RUNNING, PAUSED, COMPLETED, ROLLED_BACK, ABORTED = (
    "running", "paused", "completed", "rolled-back", "aborted")
ACTIVE = (RUNNING, PAUSED)
DEFAULT_STEPS = (1.0, 5.0, 25.0, 50.0, 100.0)
LOCK_S = 10.0

Audit = Callable[[str, str, str, Any], Any]  # who, action, target, detail

ROLLOUT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _windows(spec: RolloutSpec, counts: Mapping[str, Mapping[str, Outcomes]],
             start: Mapping[str, Mapping[str, str]]) -> dict[str, Outcomes]:
    """The baseline's and the candidate's counts since ``start`` (per region, the counts
    of each balancer run as stored), summed over the regions and the runs; a run absent
    at the start counts whole."""
    totals = {spec.candidate: Outcomes(), spec.baseline: Outcomes()}
    for region, runs in counts.items():
        since = start.get(region, {})
        for name, now in runs.items():
            parsed = parse_outcome_field(name)
            assert parsed is not None  # _read_counts kept only well-formed fields
            earlier = Outcomes.from_json(since[name]) if name in since else Outcomes()
            totals[parsed[1]] = totals[parsed[1]].plus(now.minus(earlier))
    return totals


class RolloutError(ValueError):
    """A rollout that cannot start or a transition that does not apply (a 4xx)."""


@dataclass(frozen=True)
class RolloutSpec:
    """What to roll out where: ``candidate`` replaces ``baseline`` for ``model`` in
    ``regions`` (empty: every region that declares both), through ``steps`` (percent of the
    traffic to the candidate, ascending, the last 100), ``interval_s`` apart."""

    model: str
    baseline: str
    candidate: str
    regions: tuple[str, ...] = ()
    steps: tuple[float, ...] = DEFAULT_STEPS
    interval_s: float = 60.0
    gates: tuple[Gate, ...] = DEFAULT_GATES
    max_inconclusive: int = 3
    # blue-green: the candidate's servers must all be up (probed, not drained) to start
    require_ready: bool = False

    def check(self, policy: Policy) -> RolloutSpec:
        """This spec with its regions resolved against ``policy``; ``RolloutError`` if it
        cannot run there."""
        if self.baseline == self.candidate:
            raise RolloutError("baseline and candidate are the same revision")
        if not self.steps or list(self.steps) != sorted(set(self.steps)) or not (
                self.steps[0] > 0 and self.steps[-1] == 100):
            raise RolloutError("steps: ascending percents in (0, 100], the last 100")
        if not 1 <= self.interval_s <= 86_400:
            raise RolloutError("interval: 1 s to a day")
        if not 0 <= self.max_inconclusive <= 100:
            raise RolloutError("max_inconclusive: 0 to 100")
        both = [r.name for r in policy.regions if {self.baseline, self.candidate} <= {
            rev for g in r.gpus for m, rev in g.revisions if m == self.model}]
        regions = self.regions or tuple(both)
        unknown = [r for r in regions if r not in both]
        if unknown:
            raise RolloutError(f"regions {', '.join(unknown)}: no gpu declares both "
                               f"{self.baseline} and {self.candidate} of {self.model}")
        if not regions:
            raise RolloutError(f"no region declares both {self.baseline} and "
                               f"{self.candidate} of {self.model}")
        return replace(self, regions=tuple(regions))

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "baseline": self.baseline, "candidate": self.candidate,
                "regions": list(self.regions), "steps": list(self.steps),
                "interval_s": self.interval_s, "max_inconclusive": self.max_inconclusive,
                "require_ready": self.require_ready,
                "gates": [{"name": g.name, "threshold": g.threshold,
                           "min_samples": g.min_samples} for g in self.gates]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RolloutSpec:
        """A spec from its JSON form (an API body); ``RolloutError`` names what is wrong."""
        try:
            gates = tuple(Gate(str(g["name"]), float(g["threshold"]),
                               int(g.get("min_samples", 50)))
                          for g in data["gates"]) if "gates" in data else DEFAULT_GATES
            return cls(model=_name(data, "model"), baseline=_name(data, "baseline"),
                       candidate=_name(data, "candidate"),
                       regions=tuple(str(r) for r in data.get("regions", ())),
                       steps=tuple(float(s) for s in data.get("steps", DEFAULT_STEPS)),
                       interval_s=float(data.get("interval_s", 60.0)), gates=gates,
                       max_inconclusive=int(data.get("max_inconclusive", 3)),
                       require_ready=_flag(data, "require_ready"))
        except (KeyError, TypeError, ValueError) as exc:
            raise RolloutError(f"rollout: {exc}") from None


def _flag(data: Mapping[str, Any], key: str) -> bool:
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"{key}: expected true or false")
    return value


def _name(data: Mapping[str, Any], key: str) -> str:
    value = data[key]
    if not isinstance(value, str) or not value or len(value) > 200:
        raise ValueError(f"{key}: expected a name")
    return value


@dataclass
class Rollout:
    """One rollout as stored: where it is and how it got there."""

    id: str
    spec: RolloutSpec
    status: str = RUNNING
    step: int = 0  # index into spec.steps
    step_started: float = 0.0  # wall clock
    window_start: dict[str, dict[str, str]] = field(default_factory=dict)  # region -> counts
    inconclusive: int = 0
    # the baseline's window of the last step that passed: what the 100 % step, which
    # sends the baseline nothing, is judged against
    reference: str | None = None
    reason: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)
    last_results: list[dict[str, Any]] = field(default_factory=list)

    @property
    def percent(self) -> float:
        """The candidate's share now (0 once rolled back or aborted)."""
        return 0.0 if self.status in (ROLLED_BACK, ABORTED) else self.spec.steps[self.step]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "spec": self.spec.to_json(), "status": self.status,
                "step": self.step, "percent": self.percent, "step_started": self.step_started,
                "window_start": self.window_start, "inconclusive": self.inconclusive,
                "reference": self.reference,
                "reason": self.reason, "history": self.history,
                "last_results": self.last_results}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Rollout:
        return cls(id=data["id"], spec=RolloutSpec.from_json(data["spec"]),
                   status=data["status"], step=int(data["step"]),
                   step_started=float(data["step_started"]),
                   window_start=dict(data.get("window_start", {})),
                   inconclusive=int(data.get("inconclusive", 0)),
                   reference=data.get("reference"),
                   reason=str(data.get("reason", "")), history=list(data.get("history", [])),
                   last_results=list(data.get("last_results", [])))


class RolloutController:
    """Starts, steps, judges and rolls back rollouts kept in the shared state."""

    def __init__(self, store: AsyncStateStore, audit: Audit,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.audit = audit
        self.clock = clock
        self.owner = uuid.uuid4().hex
        self.known: dict[str, Rollout] = {}  # as last read or written here (the metrics)
        self._where = describe(store.client)

    # -- reads ---------------------------------------------------------------------------

    async def all(self) -> list[Rollout]:
        with redis_errors(self._where):
            raw = await self.store.client.hgetall(self.store.keys.rollouts)
        rollouts = [Rollout.from_json(json.loads(v)) for v in raw.values()]
        self.known = {r.id: r for r in rollouts}
        return sorted(rollouts, key=lambda r: r.history[0]["at"] if r.history else 0.0)

    async def get(self, rollout_id: str) -> Rollout:
        with redis_errors(self._where):
            raw = await self.store.client.hget(self.store.keys.rollouts, rollout_id)
        if raw is None:
            raise KeyError(rollout_id)
        return Rollout.from_json(json.loads(raw))

    # -- operator actions ----------------------------------------------------------------

    async def start(self, spec: RolloutSpec, policy: Policy, who: str,
                    rollout_id: str | None = None) -> Rollout:
        """Start a rollout (``rollout_id``: its id, chosen by the caller, such as a drill
        that must undo it; else a random one)."""
        if rollout_id is not None and not ROLLOUT_ID.fullmatch(rollout_id):
            raise RolloutError(f"id: {rollout_id!r}: expected 1-64 letters, digits, '-' or "
                               "'_'")
        spec = spec.check(policy)
        if spec.require_ready:
            await self._check_ready(spec, policy)
        for other in await self.all():
            if other.spec.model == spec.model and other.status in ACTIVE:
                raise RolloutError(f"rollout {other.id} of {spec.model} is {other.status}")
            if other.id == rollout_id:
                raise RolloutError(f"rollout {other.id} is {other.status}: clear it first")
        rollout = Rollout(id=rollout_id or uuid.uuid4().hex[:10], spec=spec)
        if spec.steps[0] >= 100:  # blue-green: the baseline as it served until now
            before = _windows(spec, await self._read_counts(spec), {})
            rollout.reference = before[spec.baseline].to_json()
        self._event(rollout, "started", who=who, spec=spec.to_json())
        await self._enter_step(rollout, 0)
        return rollout

    async def pause(self, rollout_id: str, who: str) -> Rollout:
        rollout = await self._active(rollout_id, RUNNING)
        rollout.status = PAUSED
        self._event(rollout, "paused", who=who)
        await self._save(rollout)
        return rollout

    async def resume(self, rollout_id: str, who: str) -> Rollout:
        rollout = await self._active(rollout_id, PAUSED)
        rollout.status, rollout.reason, rollout.inconclusive = RUNNING, "", 0
        self._event(rollout, "resumed", who=who)
        await self._enter_step(rollout, rollout.step)  # a fresh window
        return rollout

    async def abort(self, rollout_id: str, who: str) -> Rollout:
        rollout = await self._active(rollout_id, *ACTIVE)
        await self._roll_back(rollout, ABORTED, f"aborted by {who}")
        return rollout

    async def clear(self, rollout_id: str, who: str) -> None:
        """Forget a finished rollout and withdraw its split (the policy's applies again)."""
        rollout = await self.get(rollout_id)
        if rollout.status in ACTIVE:
            raise RolloutError(f"rollout {rollout.id} is {rollout.status}: abort it first")
        with redis_errors(self._where):
            pipe = self.store.client.pipeline(transaction=False)
            for region in rollout.spec.regions:
                pipe.hdel(self.store.keys.split(region), rollout.spec.model)
                pipe.publish(self.store.keys.changes, self.store.keys.split(region))
            pipe.hdel(self.store.keys.rollouts, rollout.id)
            await pipe.execute()
        self.known.pop(rollout.id, None)

    # -- the loop ------------------------------------------------------------------------

    @property
    def _lock(self) -> str:
        return self.store.keys.rollouts + ":lock"

    async def release(self) -> None:
        """Give up the controllers' lock (an API stopping): another instance takes over at
        its next tick instead of after ``LOCK_S``."""
        with redis_errors(self._where):
            if await self._holds_lock():
                await self.store.client.delete(self._lock)

    async def _holds_lock(self) -> bool:
        return (await self.store.client.get(self._lock) or b"").decode() == self.owner

    async def tick(self) -> list[Rollout]:
        """Judge every active rollout once (under the controllers' lock: one API instance
        at a time) and refresh ``known``; returns those that changed."""
        with redis_errors(self._where):
            taken = await self.store.client.set(self._lock, self.owner, nx=True,
                                                px=int(LOCK_S * 1000))
            if not taken:
                if not await self._holds_lock():
                    await self.all()  # another instance judges; ``known`` stays current
                    return []
                await self.store.client.pexpire(self._lock, int(LOCK_S * 1000))
        changed = []
        for rollout in await self.all():
            if rollout.status in ACTIVE and await self._judge(rollout):
                changed.append(rollout)
        return changed

    async def _judge(self, rollout: Rollout) -> bool:
        spec = rollout.spec
        totals = _windows(spec, await self._read_counts(spec), rollout.window_start)
        baseline = totals[spec.baseline]
        if spec.steps[rollout.step] >= 100 and rollout.reference is not None:
            baseline = Outcomes.from_json(rollout.reference)  # it gets no traffic now
        verdict, results = judge_all(spec.gates, totals[spec.candidate], baseline)
        rollout.last_results = [r.to_json() for r in results]
        if verdict is Verdict.FAIL:
            failed = "; ".join(r.detail for r in results if r.verdict is Verdict.FAIL)
            await self._roll_back(rollout, ROLLED_BACK, f"step {spec.steps[rollout.step]:g} %: "
                                                        f"{failed}")
            self.audit("controller", "rollout.rollback", f"rollout {rollout.id}",
                       {"reason": rollout.reason, "results": rollout.last_results})
            return True
        if rollout.status == PAUSED:  # held: judged for failures only
            await self._save(rollout)
            return False
        if self.clock() - rollout.step_started < spec.interval_s:
            await self._save(rollout)
            return False
        if verdict is Verdict.PASS:
            self._event(rollout, "passed", percent=spec.steps[rollout.step],
                        results=rollout.last_results)
            rollout.reference = baseline.to_json()
            if rollout.step + 1 == len(spec.steps):
                rollout.status = COMPLETED
                self._event(rollout, "completed")
                await self._save(rollout)
                self.audit("controller", "rollout.complete", f"rollout {rollout.id}", {})
            else:
                await self._enter_step(rollout, rollout.step + 1)
                self.audit("controller", "rollout.step", f"rollout {rollout.id}",
                           {"percent": rollout.percent})
            return True
        rollout.inconclusive += 1
        if rollout.inconclusive > spec.max_inconclusive:
            rollout.status = PAUSED
            rollout.reason = ("too few samples to judge: "
                              + "; ".join(r.detail for r in results
                                          if r.verdict is Verdict.INCONCLUSIVE))
            self._event(rollout, "paused", who="controller", reason=rollout.reason)
            self.audit("controller", "rollout.pause", f"rollout {rollout.id}",
                       {"reason": rollout.reason})
        else:  # the window goes on for another interval
            rollout.step_started = self.clock()
            self._event(rollout, "extended", percent=spec.steps[rollout.step])
        await self._save(rollout)
        return True

    # -- transitions ---------------------------------------------------------------------

    async def _enter_step(self, rollout: Rollout, step: int) -> None:
        spec = rollout.spec
        rollout.step, rollout.inconclusive = step, 0
        rollout.step_started = self.clock()
        percent = spec.steps[step]
        await self._write_split(spec, ((spec.baseline, 100.0 - percent),
                                       (spec.candidate, percent)))
        counts = await self._read_counts(spec)
        rollout.window_start = {region: {k: o.to_json() for k, o in by.items()}
                                for region, by in counts.items()}
        self._event(rollout, "step", percent=percent)
        await self._save(rollout)

    async def _roll_back(self, rollout: Rollout, status: str, reason: str) -> None:
        spec = rollout.spec
        await self._write_split(spec, ((spec.baseline, 100.0), (spec.candidate, 0.0)))
        rollout.status, rollout.reason = status, reason
        self._event(rollout, status, reason=reason)
        await self._save(rollout)

    async def _check_ready(self, spec: RolloutSpec, policy: Policy) -> None:
        """Blue-green's precondition: every server of the candidate in the rollout's
        regions is up by its probes and not drained; else ``RolloutError`` naming them."""
        servers = [(r.name, g.name) for r in policy.regions if r.name in spec.regions
                   for g in r.gpus if (spec.model, spec.candidate) in g.revisions]
        keys = [self.store.keys.gpu_health(region, gpu) for region, gpu in servers]
        fetched = await self.store.fetch(keys)
        drains = await self.store.drains()
        not_ready = []
        for (region, gpu), key in zip(servers, keys, strict=True):
            raw = fetched.get(key)
            up = HealthRecord.from_fields(raw).up if raw else None
            if up is not True or (region, gpu) in drains.gpus or region in drains.regions:
                not_ready.append(f"{region}/{gpu}")
        if not_ready:
            raise RolloutError(f"not ready for {spec.candidate}: {', '.join(not_ready)} "
                               "(down, not probed yet, or drained)")

    async def _active(self, rollout_id: str, *statuses: str) -> Rollout:
        rollout = await self.get(rollout_id)
        if rollout.status not in statuses:
            raise RolloutError(f"rollout {rollout.id} is {rollout.status}")
        return rollout

    def _event(self, rollout: Rollout, kind: str, **detail: Any) -> None:
        rollout.history.append({"at": self.clock(), "event": kind, **detail})

    # -- the shared state ----------------------------------------------------------------

    async def _write_split(self, spec: RolloutSpec, weights: Sequence[tuple[str, float]]) -> None:
        value = json.dumps([[r, w] for r, w in weights])
        with redis_errors(self._where):
            pipe = self.store.client.pipeline(transaction=False)
            for region in spec.regions:
                pipe.hset(self.store.keys.split(region), spec.model, value)
                pipe.publish(self.store.keys.changes, self.store.keys.split(region))
            await pipe.execute()
        written = {spec.model: value}
        for region in spec.regions:
            self._warn_unless_durable(await self.store.confirm(
                Expected(self.store.keys.split(region), written)), f"split of {region}")

    def _warn_unless_durable(self, durability: Durability, what: str) -> None:
        if not durability.durable:
            log.warning("rollouts: the %s is %s", what, durability.describe())

    async def _read_counts(self, spec: RolloutSpec) -> dict[str, dict[str, Outcomes]]:
        """Per region, the cumulative counts of the baseline and the candidate, one entry
        per balancer run (the field: ``outcome_field``); a malformed one is left out."""
        revisions = (spec.baseline, spec.candidate)
        fetched = await self.store.fetch([self.store.keys.outcomes(r) for r in spec.regions])
        counts: dict[str, dict[str, Outcomes]] = {}
        for region in spec.regions:
            counts[region] = {}
            for raw_name, value in fetched.get(self.store.keys.outcomes(region), {}).items():
                name = raw_name.decode() if isinstance(raw_name, bytes) else raw_name
                parsed = parse_outcome_field(name)
                if parsed is None or parsed[0] != spec.model or parsed[1] not in revisions:
                    continue
                try:
                    counts[region][name] = Outcomes.from_json(value)
                except RecordError as exc:
                    log.warning("rollouts: ignoring %s of %s: %s", name, region, exc)
        return counts

    async def _save(self, rollout: Rollout) -> None:
        value = json.dumps(rollout.to_json(), sort_keys=True)
        with redis_errors(self._where):
            await self.store.client.hset(self.store.keys.rollouts, rollout.id, value)
        self.known[rollout.id] = rollout
        self._warn_unless_durable(await self.store.confirm(
            Expected(self.store.keys.rollouts, {rollout.id: value})), f"rollout {rollout.id}")
