"""Fixtures of the deployment tests: the example policy, the policies shipped in deploy/,
and the ports the code listens on by default."""

from __future__ import annotations

import pytest
from cli_check import option_default, simulator_default
from deploy_files import COMPOSE_POLICY, ROOT, k8s_policy_files, port_of

from policies import load_policy
from policies.model import Policy

EXAMPLE = ROOT / "policies" / "examples" / "global.dp"


@pytest.fixture(scope="session")
def example() -> Policy:
    return load_policy(str(EXAMPLE))


@pytest.fixture(scope="session")
def compose_policy() -> Policy:
    return load_policy(str(COMPOSE_POLICY))


@pytest.fixture(scope="session")
def k8s_policy(tmp_path_factory) -> Policy:
    return load_policy(str(k8s_policy_files(tmp_path_factory.mktemp("k8s-policy"))))


@pytest.fixture(scope="session")
def defaults() -> dict[str, int]:
    """The ports the code listens on by default."""
    from director.api.config import DEFAULT_LISTEN
    from regions.balancer.config import SERVED_PORT as balancer

    assert option_default(("up",), "--balancer-port") == balancer
    assert option_default(("api", "serve"), "--balancer-port") == balancer
    api = port_of(option_default(("api", "serve"), "--listen"))
    assert api == port_of(DEFAULT_LISTEN) == port_of(option_default(("up",), "--api"))
    return {
        "dns": port_of(option_default(("dns", "serve"), "--listen")),
        "dns_metrics": port_of(option_default(("up",), "--dns-metrics")),
        "api": api,
        "balancer": balancer,
        "simulator": port_of(simulator_default("--listen")),
    }

