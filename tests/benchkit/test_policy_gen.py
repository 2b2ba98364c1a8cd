"""The generated policies the policy-check benchmark times are valid and have the asked shape."""

from __future__ import annotations

import pytest

from benchkit.policy_gen import generate
from policies import load_policy_text


@pytest.mark.parametrize(("regions", "gpus", "services"), [(10, 2, 3), (50, 3, 4)])
def test_generated_policy_loads_with_the_asked_shape(regions, gpus, services) -> None:
    policy = load_policy_text(generate(regions, gpus, services))
    assert len(policy.regions) == regions
    assert all(len(r.gpus) == gpus for r in policy.regions)
    assert len(policy.services) == services
    jurisdictions = {r.jurisdiction for r in policy.regions}
    assert {"EU", "IN", "US"} <= jurisdictions
    for service in policy.services:
        assert [rule.name for rule in service.residency] == ["eu-gdpr", "india"]


def test_too_few_regions_for_both_rules_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one EU and one IN region"):
        generate(regions=2)
