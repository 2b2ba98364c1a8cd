"""The policy gate has a deadline: a policy whose check runs past it is refused with an
error at the service whose proof was under way, and the engine proof stops there."""

from __future__ import annotations

from pathlib import Path

import pytest

from director import policy_gate
from policies.deadline import Deadline
from policies.errors import DeadlineExceeded

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "policies" / "examples" / "global.dp"


class StepClock:
    """A clock that moves ``step`` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_the_engine_proof_stops_at_the_first_service_past_the_deadline() -> None:
    policy = policy_gate.load(str(EXAMPLE))
    # read at creation (1), then before each service: the second service is past 2.5
    deadline = Deadline(1.5, clock=StepClock(1.0))
    with pytest.raises(DeadlineExceeded) as raised:
        policy_gate.engine_proof(policy, deadline=deadline)
    second = policy.services[1]
    assert raised.value.pos == second.pos
    assert str(raised.value) == ("checking the policy took longer than its deadline of 1.5 s "
                                 f"(while running the engine proof of service {second.name})")


def test_a_policy_past_the_deadline_is_refused_at_the_service_under_way(
        monkeypatch: pytest.MonkeyPatch) -> None:
    policy = policy_gate.load(str(EXAMPLE))
    clock = StepClock(0.0)

    def deadline(seconds: float) -> Deadline:
        return Deadline(seconds, clock=clock)

    real = policy_gate.engine_proof

    def late_engine_proof(*args, **kwargs):
        clock.step = 10.0  # from the engine proof on, every read is 10 s later
        return real(*args, **kwargs)

    monkeypatch.setattr(policy_gate, "Deadline", deadline)
    monkeypatch.setattr(policy_gate, "engine_proof", late_engine_proof)
    acceptance = policy_gate.accept(str(EXAMPLE), deadline_s=5.0)
    assert not acceptance.ok and acceptance.policy is None
    rendered = acceptance.error().render()
    first = policy.services[0]
    assert rendered.startswith(f"{first.pos}: error: checking the policy took longer than "
                               f"its deadline of 5 s (while running the engine proof of "
                               f"service {first.name})"), rendered
    assert "the running policy stays in force" in rendered


def test_within_the_deadline_the_policy_is_accepted() -> None:
    acceptance = policy_gate.accept(str(EXAMPLE), deadline_s=600.0)
    assert acceptance.ok, acceptance.error().render()
