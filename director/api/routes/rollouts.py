"""Rollouts of a new revision of a model (``director.rollouts.controller``): start one,
read them, pause, resume, abort, and clear a finished one. Changes are audited."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

from fastapi import APIRouter, Request

from director.api.changes import audited
from director.api.deps import Admin, Reader, Runtime
from director.api.errors import ApiError
from director.rollouts.controller import ACTIVE, Rollout, RolloutError, RolloutSpec

router = APIRouter(prefix="/api/v1/rollouts", tags=["rollouts"])
T = TypeVar("T")


@contextlib.asynccontextmanager
async def _answered() -> AsyncIterator[None]:
    """A controller's refusal as an API error: 404 for an unknown rollout, 409 for one
    whose state does not allow the action, 422 for a spec that cannot run."""
    try:
        yield
    except KeyError as exc:
        raise ApiError(f"no rollout {exc.args[0]}", status=404) from None
    except RolloutError as exc:
        status = 409 if " is " in str(exc) else 422
        raise ApiError(str(exc), status=status) from None


async def _refused_as_api_errors(change: Awaitable[T]) -> T:
    async with _answered():
        return await change


@router.get("", summary="Every rollout, oldest first")
async def list_rollouts(runtime: Runtime, who: Reader) -> dict[str, Any]:
    return {"rollouts": [r.to_json() for r in await runtime.rollouts.all()]}


@router.get("/{rollout_id}", summary="One rollout: its step, gates and history")
async def get_rollout(rollout_id: str, runtime: Runtime, who: Reader) -> dict[str, Any]:
    async with _answered():
        return (await runtime.rollouts.get(rollout_id)).to_json()


@router.post("", status_code=201, summary="Start a rollout of a revision")
async def start_rollout(request: Request, runtime: Runtime, who: Admin) -> dict[str, Any]:
    """``{"model", "baseline", "candidate", "regions"?, "steps"?, "interval_s"?, "gates"?,
    "max_inconclusive"?, "require_ready"?}``: ``candidate`` takes ``steps`` percent
    (default 1, 5, 25, 50, 100) of ``model``'s traffic in ``regions`` (default: every
    region that declares both revisions), each step ``interval_s`` long (default 60) and
    judged by ``gates`` (``[{"name", "threshold", "min_samples"?}]``; default p95 TTFT and
    inter-token latency within 1.25x, error rate within 2 points, finish-reason mix and
    mean output length). ``require_ready`` (blue-green, with ``"steps": [100]``): refused
    (422) unless every server of the candidate is up and not drained. ``id``: the
    rollout's id (default: a random one); 409 if a rollout of that id is stored."""
    try:
        body = json.loads(await request.body())
    except ValueError:
        raise ApiError("expected a JSON object", status=422) from None
    if not isinstance(body, dict):
        raise ApiError("expected a JSON object", status=422)
    rollout_id = body.pop("id", None)
    if rollout_id is not None and not isinstance(rollout_id, str):
        raise ApiError("id: expected a string", status=422)
    async with _answered():
        spec = RolloutSpec.from_json(body)
        rollout = await audited(runtime, who, "rollout.start", f"model {spec.model}",
                                spec.to_json(), _refused_as_api_errors(
                                    runtime.rollouts.start(spec, runtime.active.policy,
                                                           who.name, rollout_id)))
    return rollout.to_json()


async def _act(runtime: Any, who: Any, action: str, rollout_id: str) -> Rollout:
    method = getattr(runtime.rollouts, action)
    rollout: Rollout = await audited(runtime, who, f"rollout.{action}", f"rollout {rollout_id}",
                                     {}, _refused_as_api_errors(method(rollout_id, who.name)))
    return rollout


@router.post("/{rollout_id}/pause", summary="Hold a running rollout at its step")
async def pause_rollout(rollout_id: str, runtime: Runtime, who: Admin) -> dict[str, Any]:
    return (await _act(runtime, who, "pause", rollout_id)).to_json()


@router.post("/{rollout_id}/resume", summary="Resume a paused rollout (a fresh window)")
async def resume_rollout(rollout_id: str, runtime: Runtime, who: Admin) -> dict[str, Any]:
    return (await _act(runtime, who, "resume", rollout_id)).to_json()


@router.post("/{rollout_id}/abort", summary="Roll back now: the baseline takes it all")
async def abort_rollout(rollout_id: str, runtime: Runtime, who: Admin) -> dict[str, Any]:
    return (await _act(runtime, who, "abort", rollout_id)).to_json()


@router.delete("/{rollout_id}", summary="Forget a finished rollout and withdraw its split")
async def clear_rollout(rollout_id: str, runtime: Runtime, who: Admin,
                        abort: bool = False) -> dict[str, Any]:
    """409 for a rollout still running or paused, unless ``?abort=true``: then it is
    rolled back first (what a drill's restore does)."""
    if abort:
        async with _answered():
            rollout = await runtime.rollouts.get(rollout_id)
        if rollout.status in ACTIVE:
            await _act(runtime, who, "abort", rollout_id)
    await audited(runtime, who, "rollout.clear", f"rollout {rollout_id}", {},
                  _refused_as_api_errors(runtime.rollouts.clear(rollout_id, who.name)))
    return {"cleared": rollout_id}
