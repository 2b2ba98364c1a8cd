"""The commands ``director up`` prints work for the policy it runs: rendered for the example
policy (nobody identified), the tenants example (API keys on: make a key, then send it), a
JWT-only policy and API keys without tenants. The printed commands are run against a real
``director up`` in test_up_end_to_end.py."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from director.up.console import try_commands
from director.up.plan import UpOptions
from policies import load_policy
from policies.model import Identity, JwtIdentity, Policy

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "policies" / "examples"
RUN_DIR = Path("/tmp/director up run")  # a space: the printed path must be quoted


def commands(policy: Policy) -> list[str]:
    options = UpOptions(EXAMPLES / "global.dp", RUN_DIR, "redis://127.0.0.1:6379/0",
                        dns=("127.0.0.1", 5353), api=("127.0.0.1", 8080))
    return try_commands(policy, options, "read-token")


def curl(lines: list[str]) -> str:
    (line,) = [c for c in lines if c.startswith("curl -N")]
    return line


@pytest.fixture(scope="module")
def tenants_policy() -> Policy:
    return load_policy(str(EXAMPLES / "tenants" / "tenants.dp"))


def test_without_identity_the_curl_sends_no_credential(example_policy: Policy) -> None:
    lines = commands(example_policy)
    assert lines[0].startswith("dig @127.0.0.1 -p 5353 chat.infer.example.com A")
    assert "Authorization" not in curl(lines)
    assert not any(line.startswith(("KEY=", "#")) for line in lines)


def test_with_api_keys_a_key_is_made_with_the_admin_token_then_sent(
        tenants_policy: Policy) -> None:
    lines = commands(tenants_policy)
    (make,) = [line for line in lines if line.startswith("KEY=")]
    # the least restricted tenant that may use the service and model: free_tier
    assert "POST http://127.0.0.1:8080/api/v1/tenants/free_tier/keys" in make
    assert "$(cat '/tmp/director up run/admin.token')" in make
    assert lines.index(make) < lines.index(curl(lines))
    assert '-H "Authorization: Bearer $KEY"' in curl(lines)
    for line in (make, curl(lines)):
        checked = subprocess.run(["bash", "-n", "-c", line], capture_output=True, text=True)
        assert checked.returncode == 0, (line, checked.stderr)


def test_a_tenant_that_lists_regions_is_chosen_only_when_no_other_fits(
        tenants_policy: Policy) -> None:
    only_acme = dataclasses.replace(tenants_policy, tenants=tuple(
        t for t in tenants_policy.tenants if t.name == "acme"))
    assert "/api/v1/tenants/acme/keys" in "\n".join(commands(only_acme))


def test_api_keys_without_tenants_says_to_declare_one(tenants_policy: Policy) -> None:
    lines = commands(dataclasses.replace(tenants_policy, tenants=()))
    assert any(line.startswith("# API keys are on but the policy declares no tenant")
               for line in lines)
    assert not any(line.startswith("KEY=") for line in lines)


def test_with_jwts_only_the_curl_sends_a_token_described_by_the_policy(
        example_policy: Policy) -> None:
    jwt = JwtIdentity("https://auth.example.com/jwks.json", issuer="https://auth.example.com/",
                      audience="director", tenant_claim="org")
    lines = commands(dataclasses.replace(example_policy,
                                         identity=Identity(api_keys=False, jwt=jwt)))
    (hint,) = [line for line in lines if line.startswith("#")]
    assert "aud director" in hint and "iss https://auth.example.com/" in hint
    assert "'org'" in hint
    assert '-H "Authorization: Bearer $TOKEN"' in curl(lines)
