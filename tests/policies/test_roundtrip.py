"""``fmt`` never changes meaning: ``load(fmt(p)) == load(p)``, for examples and random policies.

Model equality leaves positions out by design, so a reformatted policy compares equal.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from policy_strategies import policies

from policies import load_policy, load_policy_text
from policies.formatter import format_text

EXAMPLES = Path(__file__).resolve().parents[2] / "policies" / "examples"
ROUNDS = settings(max_examples=75,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _formatted_reader(root: Path):
    def reader(name: str) -> str:
        return format_text((root / name).read_text(encoding="utf-8"), name)
    return reader


@pytest.mark.parametrize("name", ["global.dp", "minimal.dp"])
def test_examples_load_the_same_after_fmt(name: str) -> None:
    original = load_policy(str(EXAMPLES / name))
    # every file, included ones too, is formatted before it is read
    formatted = load_policy(name, reader=_formatted_reader(EXAMPLES))
    assert formatted == original


def test_positions_are_not_part_of_equality() -> None:
    text = (EXAMPLES / "minimal.dp").read_text(encoding="utf-8")
    shifted = load_policy_text("\n\n# moved\n" + text.replace("    ", "\t"))
    original = load_policy_text(text)
    assert shifted == original
    assert shifted.regions[0].pos != original.regions[0].pos


@ROUNDS
@given(policies())
def test_fmt_on_random_policies(text: str) -> None:
    policy = load_policy_text(text)  # the strategy writes valid policies only
    once = format_text(text)
    assert format_text(once) == once  # idempotent
    assert load_policy_text(once) == policy  # same meaning
