"""The test-only switch that loads a policy without its residency proof."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies import PolicyError, load_policy_text, read_sources
from policies.loader import UNSAFE_SKIP_PROOF_ENV

EXAMPLE = Path(__file__).resolve().parents[2] / "policies" / "examples" / "global.dp"


def leaky_example() -> tuple[str, dict[str, str]]:
    """The example with the chat EU rule falling back to us-east when the EU is down."""
    sources = read_sources(str(EXAMPLE))
    text = sources.text.replace(
        "all-down answer-allowed  # fail static inside the EU, never cross the border",
        "all-down fallback us-east", 1)
    assert text != sources.text
    return text, sources.files


def test_a_leaky_policy_never_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UNSAFE_SKIP_PROOF_ENV, raising=False)
    text, files = leaky_example()
    with pytest.raises(PolicyError, match="us-east"):
        load_policy_text(text, "global.dp", files)


def test_the_switch_skips_the_proof(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(UNSAFE_SKIP_PROOF_ENV, "1")
    text, files = leaky_example()
    policy = load_policy_text(text, "global.dp", files)
    rule = policy.service("chat.infer.example.com").residency[0]
    assert rule.all_down.regions == ("us-east",)
