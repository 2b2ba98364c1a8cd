"""Run a change and write its audit line, whatever its outcome."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar

from director.api.auth import Principal
from director.api.errors import ApiError
from director.api.runtime import ApiRuntime
from state import StateError
from state.durability import Durability

T = TypeVar("T")


async def audited(runtime: ApiRuntime, who: Principal, action: str, target: str,
                  detail: Any, change: Awaitable[T]) -> T:
    """Await ``change``; append ``{"who", "action", "target", "detail", "outcome"}`` to the
    audit log ("ok", "rejected: ..." for a 4xx, "error: ..." otherwise) and count it."""
    try:
        result = await change
    except ApiError as exc:
        kind = "rejected" if exc.status < 500 else "error"
        _note(runtime, who, action, target, detail, f"{kind}: {exc.message.splitlines()[0]}")
        raise
    except StateError as exc:
        _note(runtime, who, action, target, detail, f"error: {exc}")
        raise
    except Exception as exc:
        _note(runtime, who, action, target, detail, f"error: {type(exc).__name__}: {exc}")
        raise
    _note(runtime, who, action, target, detail, _outcome(result))
    return result


def _outcome(result: Any) -> str:
    """"ok", or "not durable: ..." when the change says it did not reach the replicas
    (``state.durability``): it stands on the master, but a failover could lose it."""
    durability = (result.get("durability") if isinstance(result, dict)
                  else getattr(result, "durability", None))
    if isinstance(durability, Durability) and not durability.durable:
        return durability.describe()
    if isinstance(durability, dict) and not durability.get("durable", True):
        return (f"not durable: {durability.get('replicas_acknowledged')} of "
                f"{durability.get('replicas_wanted')} replica(s) acknowledged")
    return "ok"


def _note(runtime: ApiRuntime, who: Principal, action: str, target: str, detail: Any,
          outcome: str) -> None:
    runtime.audit.record(who.name, action, target, detail, outcome)
    runtime.metrics.changes.labels(action, outcome.split(":")[0]).inc()
