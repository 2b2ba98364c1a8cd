# SPDX-License-Identifier: Apache-2.0
"""What ``director up`` asks of each balancer: its own loopback edge named as trusted, and
an admin listener of its own on loopback; the API with its chaos routes on."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from director.up.plan import UpOptions, balancer_hosts, plan_children, replica_address
from director.up.run import start_groups
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


def test_ha_runs_two_of_each_and_a_balancer_on_every_endpoint(tmp_path: Path) -> None:
    ha = EXAMPLE.with_name("ha.dp")
    policy = load_policy(str(ha))
    options = UpOptions(ha, tmp_path, "redis+sentinel://127.0.8.1:26379/m", ha=True,
                        dns=("127.0.0.1", 5353), api=("127.0.0.1", 8080))
    plan = plan_children(policy, options)
    listens = {c.name: option_values(c.argv, "--listen") for c in plan}
    assert listens["dns/1"] == ["127.0.0.1:5353"] and listens["dns/2"] == ["127.0.0.2:5353"]
    assert listens["api/1"] == ["127.0.0.1:8080"] and listens["api/2"] == ["127.0.0.2:8080"]
    assert option_values(next(c.argv for c in plan if c.name == "api/2"), "--dns") == [
        "127.0.0.1:5353,127.0.0.2:5353"]
    assert {c.name for c in plan if c.role == "workers"} == {"workers/1", "workers/2"}
    assert {c.name: listens[c.name] for c in plan if c.role == "balancer"} == {
        "balancer/us-east": ["127.0.1.1:8080"], "balancer/us-east/2": ["127.0.1.2:8080"],
        "balancer/eu-west": ["127.0.2.1:8080"], "balancer/eu-west/2": ["127.0.2.2:8080"]}
    # without --ha: one of each, a region's IPv4-mapped endpoint being the same host
    single = plan_children(load_policy(str(EXAMPLE)), UpOptions(EXAMPLE, tmp_path, "redis://x"))
    assert Counter(c.role for c in single if c.role != "gpu") == Counter(
        {"balancer": 4, "workers": 1, "dns": 1, "api": 1})


def test_balancer_hosts_and_replica_addresses() -> None:
    assert balancer_hosts(("127.0.1.1",), ("::ffff:127.0.1.1", "::1")) == ["127.0.1.1", "::1"]
    assert replica_address(("127.0.0.1", 53), 1) == ("127.0.0.2", 53)
    assert replica_address(("::1", 53), 1) == ("::1", 54)
    assert replica_address(("10.0.0.1", 53), 0) == ("10.0.0.1", 53)


def test_dnssec_signs_in_the_dns_server_or_with_ha_through_a_presigner(tmp_path: Path) -> None:
    policy = load_policy(str(EXAMPLE))
    single = plan_children(policy, UpOptions(EXAMPLE, tmp_path, "redis://x", dnssec=True))
    (dns_child,) = [c for c in single if c.role == "dns"]
    assert option_values(dns_child.argv, "--dnssec-keys") == [str(tmp_path / "dnssec-keys")]
    assert not [c for c in single if c.role == "dnssec"]
    ha = EXAMPLE.with_name("ha.dp")
    replicated = plan_children(load_policy(str(ha)), UpOptions(
        ha, tmp_path, "redis+sentinel://127.0.8.1:26379/m", ha=True, dnssec=True))
    for child in (c for c in replicated if c.role == "dns"):
        assert "--dnssec-presigned" in child.argv and "--dnssec-keys" not in child.argv
    (presigner,) = [c for c in replicated if c.role == "dnssec"]
    assert option_values(presigner.argv, "--keys") == [str(tmp_path / "dnssec-keys")]
    started = [name for group in start_groups(replicated) for name in group]
    assert sorted(started) == sorted(c.name for c in replicated)  # every child starts
    assert started.index("dnssec/presign") < started.index("dns/1")
    assert "--dnssec-keys" not in " ".join(
        str(a) for c in plan_children(policy, UpOptions(EXAMPLE, tmp_path, "redis://x"))
        for a in c.argv)
