# SPDX-License-Identifier: Apache-2.0
"""What ``director up`` asks of each balancer: its own loopback edge named as trusted, and
an admin listener of its own on loopback; the API with its chaos routes on."""

from __future__ import annotations

from pathlib import Path

from director.up.plan import UpOptions, plan_children
from policies import load_policy

EXAMPLE = Path(__file__).resolve().parents[2] / "policies" / "examples" / "global.dp"


def option_values(argv: tuple[str, ...], name: str) -> list[str]:
    return [argv[i + 1] for i, token in enumerate(argv[:-1]) if token == name]


def test_balancers_trust_loopback_and_get_one_admin_listener_each(tmp_path: Path) -> None:
    policy = load_policy(str(EXAMPLE))
    options = UpOptions(EXAMPLE, tmp_path, "redis://127.0.0.1:1/0", balancer_admin_port=9999)
    balancers = [c for c in plan_children(policy, options) if c.role == "balancer"]
    assert len(balancers) == len(policy.regions)
    admins = []
    for child in balancers:
        assert option_values(child.argv, "--trusted-network") == ["127.0.0.0/8", "::1/128"]
        (listen,) = option_values(child.argv, "--listen")
        (admin,) = option_values(child.argv, "--admin-listen")
        host = listen.rsplit(":", 1)[0]
        assert admin == f"{host}:9999" and host.startswith("127.")
        assert ("tcp", host, 9999) in {(b.protocol, b.host, b.port) for b in child.binds}
        admins.append(admin)
    assert len(set(admins)) == len(admins)
    (api,) = [c for c in plan_children(policy, options) if c.role == "api"]
    assert "--enable-chaos" in api.argv  # the drills of an embedded run break things


def test_the_dns_server_precompiles_unless_told_not_to(tmp_path: Path) -> None:
    policy = load_policy(str(EXAMPLE))

    def dns_argv(dns_precompile: bool = True) -> tuple[str, ...]:
        plan = plan_children(policy, UpOptions(EXAMPLE, tmp_path, "redis://127.0.0.1:1/0",
                                               dns_precompile=dns_precompile))
        (dns,) = [c for c in plan if c.role == "dns"]
        return dns.argv

    assert "--no-precompile" not in dns_argv()
    assert "--no-precompile" in dns_argv(dns_precompile=False)


FINGERPRINTED = """
zone infer.example.com { ns ns1.infer.example.com 127.0.0.1 }
region eu { location 50 8; jurisdiction EU; endpoints 127.0.0.1; capacity 10rps
    gpu a { url http://127.0.1.11:8000; models m; revision m r1 fingerprint "/w/m@r1" }
    gpu b { url http://127.0.1.12:8000; models m }
}
service chat.infer.example.com { all-down answer-nothing }
"""


def test_a_simulated_gpu_serves_the_fingerprint_its_policy_declares(tmp_path: Path) -> None:
    path = tmp_path / "p.dp"
    path.write_text(FINGERPRINTED)
    policy = load_policy(str(path))
    options = UpOptions(path, tmp_path, "redis://127.0.0.1:1/0", simulate=True)
    gpus = [c for c in plan_children(policy, options)
            if c.role == "gpu"]
    assert [option_values(c.argv, "--root") for c in gpus] == [["m=/w/m@r1"], []]


def test_a_simulated_gpu_with_adapter_slots_serves_lora(tmp_path: Path) -> None:
    path = tmp_path / "p.dp"
    path.write_text(FINGERPRINTED.replace("gpu b { url http://127.0.1.12:8000; models m }",
                                          "gpu b { url http://127.0.1.12:8000; models m; "
                                          "adapter-slots 8 }"))
    policy = load_policy(str(path))
    options = UpOptions(path, tmp_path, "redis://127.0.0.1:1/0", simulate=True)
    gpus = [c for c in plan_children(policy, options) if c.role == "gpu"]
    assert [(option_values(c.argv, "--max-loras"), option_values(c.argv, "--max-cpu-loras"))
            for c in gpus] == [([], []), (["8"], ["8"])]
