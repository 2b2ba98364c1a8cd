"""Deployment files (deploy/) against the code: every file parses and every folder has a
README; every command and option used by compose, Kubernetes, systemd and the docs exists;
the policies shipped pass `director policy check`; compose and systemd ports are the code's."""

from __future__ import annotations

import ipaddress
import tomllib
from urllib.parse import urlsplit

import pytest
from cli_check import (
    check_director,
    check_simulator,
    director_sites,
    ids,
    option_default,
    simulator_sites,
    simulators_by_gpu,
    sites_of,
)
from deploy_files import (
    COMPOSE_DIR,
    COMPOSE_POLICY,
    DEPLOY,
    ROOT,
    SYSTEMD_DIR,
    compose,
    compose_commands,
    compose_container_ports,
    compose_services,
    doc_commands,
    env_file,
    exec_variables,
    json_files,
    k8s_commands,
    k8s_containers,
    k8s_kind,
    k8s_policy_files,
    load_json,
    markdown_files,
    port_of,
    systemd_commands,
    systemd_env,
    systemd_unit,
    systemd_units,
    yaml_documents,
    yaml_files,
)
from typer.testing import CliRunner

from director.cli import app
from policies import check_policy
from tests.packages import PACKAGES

DEPLOY_SITES = [*compose_commands(), *k8s_commands(), *systemd_commands()]
DOC_SITES = [site for path in markdown_files() if path.exists() for site in doc_commands(path)]


# -- every file parses; every folder explains itself ------------------------------------


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_yaml_parses(path):
    assert yaml_documents(path), f"{path}: no YAML document"


@pytest.mark.parametrize("path", json_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_json_parses(path):
    assert load_json(path)


@pytest.mark.parametrize("folder", ["", *sorted(p.name for p in DEPLOY.iterdir() if p.is_dir())])
def test_every_deploy_folder_has_a_readme(folder):
    readme = DEPLOY / folder / "README.md"
    assert readme.exists(), f"{readme} missing"
    assert len(readme.read_text(encoding="utf-8").split()) > 50, f"{readme} says too little"


def test_deploy_readme_names_every_folder():
    text = (DEPLOY / "README.md").read_text(encoding="utf-8")
    for folder in (p.name for p in DEPLOY.iterdir() if p.is_dir()):
        assert f"{folder}/" in text, f"deploy/README.md does not mention {folder}/"


# -- commands and options exist -------------------------------------------------------


def test_deployments_run_every_component():
    for where in ("compose", "k8s", "systemd"):
        sites = [s for s in DEPLOY_SITES if s.where.startswith(where + ":")]
        for path in (("dns", "serve"), ("api", "serve"), ("workers",), ("region", "serve")):
            assert sites_of(sites, *path), f"{where}: nothing runs director {' '.join(path)}"
        assert simulator_sites(sites), f"{where}: no simulated GPU server"


@pytest.mark.parametrize("site", director_sites(DEPLOY_SITES),
                         ids=ids(director_sites(DEPLOY_SITES)))
def test_director_command_lines_exist(site):
    assert check_director(site.argv) == []


@pytest.mark.parametrize("site", simulator_sites(DEPLOY_SITES),
                         ids=ids(simulator_sites(DEPLOY_SITES)))
def test_simulator_command_lines_exist(site):
    assert check_simulator(site.argv) == []


@pytest.mark.parametrize("site", director_sites(DOC_SITES), ids=ids(director_sites(DOC_SITES)))
def test_documented_director_commands_exist(site):
    assert check_director(site.argv) == []


def test_documented_simulator_commands_exist():
    for site in simulator_sites(DOC_SITES):
        assert check_simulator(site.argv) == [], site.where


@pytest.mark.parametrize("site", sites_of(DEPLOY_SITES, "api", "serve"),
                         ids=ids(sites_of(DEPLOY_SITES, "api", "serve")))
def test_api_on_a_remote_address_says_so(site):
    from director.api.config import parse_listen
    from state.ports import is_loopback

    host, _ = parse_listen(site.option("--listen") or option_default(("api", "serve"),
                                                                      "--listen"))
    if not is_loopback(host):
        assert "--allow-remote" in site.argv, f"{site.where}: --listen {host} needs --allow-remote"


DNS_SITES = sites_of(DEPLOY_SITES, "dns", "serve")


@pytest.mark.parametrize("site", DNS_SITES, ids=ids(DNS_SITES))
def test_shipped_dns_servers_enforce_rate_limiting_with_slip_2(site):
    """Log-only is for loopback (the code's default there); a deployment others can reach
    limits reflection. Slip 2: every second limited query is truncated, so a real resolver
    behind a forged network retries over TCP instead of timing out."""
    assert site.option("--rrl") == "enforce", f"{site.where}: --rrl {site.option('--rrl')}"
    assert site.option("--rrl-slip") == "2", f"{site.where}: --rrl-slip"


BALANCER_SITES = sites_of(DEPLOY_SITES, "region", "serve")


@pytest.mark.parametrize("site", BALANCER_SITES, ids=ids(BALANCER_SITES))
def test_balancers_trust_only_named_edges(site):
    """A deployed balancer believes X-Director-Client-* only from the edge it names: no
    whole private network (a cluster's 10.0.0.0/8, a compose subnet), at most one small
    block of edge proxies."""
    for text in site.options("--trusted-network"):
        network = ipaddress.ip_network(text)
        assert network.num_addresses <= 16, f"{site.where}: --trusted-network {text}"


FOLLOWERS = [site for path in (("dns", "serve"), ("region", "serve"), ("workers",))
             for site in sites_of(DEPLOY_SITES, *path)]


@pytest.mark.parametrize("site", FOLLOWERS, ids=ids(FOLLOWERS))
def test_every_follower_follows_the_stored_policy(site):
    """After a PUT, DNS, balancers and workers serve the new version: each has the shared
    state and says --follow-policy (the default with --redis for balancers and workers;
    DNS needs it), never --no-follow-policy."""
    assert site.option("--redis"), f"{site.where}: no --redis, nothing to follow"
    assert "--follow-policy" in site.argv, f"{site.where}: without --follow-policy"
    assert "--no-follow-policy" not in site.argv, f"{site.where}: --no-follow-policy"


def test_workers_run_beat_and_kubernetes_runs_two_of_them():
    """Beat runs in every worker (the beat lease lets one send at a time), so losing a
    worker loses no probes: Kubernetes runs two."""
    for where in ("compose", "k8s"):
        workers = sites_of([s for s in DEPLOY_SITES if s.where.startswith(where + ":")],
                           "workers")
        assert workers and all("--no-beat" not in s.argv for s in workers), where
    (deployment,) = [d for d in k8s_kind("Deployment") if d["metadata"]["name"] == "workers"]
    assert deployment["spec"]["replicas"] >= 2


# -- the policies shipped in deploy/ ----------------------------------------------------


def policy_check(path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["policy", "check", str(path)])
    assert result.exit_code == 0, result.output
    assert f"{path}: ok" in result.output


def test_compose_policy_passes_director_policy_check():
    policy_check(COMPOSE_POLICY)
    for path in [COMPOSE_POLICY, *sorted((COMPOSE_POLICY.parent / "regions").glob("*.dp"))]:
        result = CliRunner().invoke(app, ["policy", "fmt", "--check", str(path)])
        assert result.exit_code == 0, result.output


def test_kubernetes_policy_passes_director_policy_check(tmp_path):
    main = k8s_policy_files(tmp_path)
    assert check_policy(str(main)).ok
    policy_check(main)
    for path in [main, *sorted((tmp_path / "regions").glob("*.dp"))]:
        result = CliRunner().invoke(app, ["policy", "fmt", "--check", str(path)])
        assert result.exit_code == 0, result.output


@pytest.mark.parametrize("which", ["compose_policy", "k8s_policy"])
def test_deploy_policies_are_the_example_with_other_addresses(which, example, request):
    policy = request.getfixturevalue(which)
    assert policy.region_names == example.region_names
    assert [s.name for s in policy.services] == [s.name for s in example.services]
    for region, original in zip(policy.regions, example.regions, strict=True):
        assert region.jurisdiction == original.jurisdiction
        assert region.capacity == original.capacity
        assert [g.name for g in region.gpus] == [g.name for g in original.gpus]
        assert [g.models for g in region.gpus] == [g.models for g in original.gpus]
        # the simulators export vLLM's metric names: a tgi or sglang engine would not parse
        assert {g.engine for g in region.gpus} == {"vllm"}
    for service, original in zip(policy.services, example.services, strict=True):
        for name in ("regions", "steer", "priority", "ttl", "degraded_ttl", "spillover",
                     "failover", "residency", "all_down", "unknown_location", "no_ecs"):
            assert getattr(service, name) == getattr(original, name), (service.name, name)
    assert policy.stale_after == example.stale_after
    assert policy.healthchecks == example.healthchecks


# -- compose: addresses, ports, one balancer per region, one simulator per GPU -------------


def test_compose_addresses_are_fixed_unique_and_in_the_subnet(compose_policy):
    (pool,) = compose()["networks"]["director"]["ipam"]["config"]
    subnet = ipaddress.ip_network(pool["subnet"])
    addresses = {}
    for name, service in compose_services().items():
        address = ipaddress.ip_address(service["networks"]["director"]["ipv4_address"])
        assert address in subnet, name
        assert address not in addresses.values(), f"{name}: {address} taken"
        addresses[name] = address
    (ns,) = compose_policy.zone.nameservers
    assert [str(a) for a in ns.addresses] == [str(addresses["dns"])]


def test_compose_balancers_sit_on_their_region_endpoints(compose_policy, defaults):
    services = compose_services()
    balancers = sites_of(compose_commands(), "region", "serve")
    assert sorted(s.option("--region") for s in balancers) == sorted(compose_policy.region_names)
    for site in balancers:
        region = compose_policy.region(site.option("--region"))
        service = services[site.where.removeprefix("compose:")]
        assert service["networks"]["director"]["ipv4_address"] == region.endpoints_v4[0]
        assert port_of(site.option("--listen")) == defaults["balancer"]
        assert site.option("--redis") == "redis://redis:6379/0"


def test_compose_runs_one_simulator_per_gpu_at_its_url(compose_policy, defaults):
    sims = simulators_by_gpu(compose_commands())
    gpus = {gpu.name: gpu for region in compose_policy.regions for gpu in region.gpus}
    assert sorted(sims) == sorted(gpus)
    for name, site in sims.items():
        url = urlsplit(gpus[name].url)
        assert site.where == f"compose:{url.hostname}", "service name is the URL's host"
        assert port_of(site.option("--listen")) == url.port == defaults["simulator"]
        assert tuple(site.options("--model")) == gpus[name].models
        if gpus[name].speed is not None:
            assert float(site.option("--speed")) == gpus[name].speed


def test_compose_ports_match_the_code(defaults):
    services = compose_services()
    (dns,) = sites_of(compose_commands(), "dns", "serve")
    dns_port = port_of(dns.option("--listen"))
    assert dns_port in (53, defaults["dns"])
    metrics = port_of(dns.option("--metrics"))
    assert metrics == defaults["dns_metrics"]
    assert {(dns_port, "udp"), (dns_port, "tcp"), (metrics, "tcp")} <= \
        compose_container_ports(services["dns"])
    assert "--follow-policy" in dns.argv
    (api,) = sites_of(compose_commands(), "api", "serve")
    assert port_of(api.option("--listen")) == defaults["api"]
    assert (defaults["api"], "tcp") in compose_container_ports(services["api"])
    assert int(api.option("--balancer-port")) == defaults["balancer"]
    assert port_of(api.option("--dns")) == dns_port
    (workers,) = sites_of(compose_commands(), "workers")
    assert int(workers.env["DIRECTOR_BALANCER_PORT"]) == defaults["balancer"]
    for site in sites_of(compose_commands(), "region", "serve"):
        service = services[site.where.removeprefix("compose:")]
        assert (defaults["balancer"], "tcp") in compose_container_ports(service)
        assert f":{defaults['balancer']}/healthz" in str(service["healthcheck"]["test"])


def test_compose_dependencies_exist():
    services = compose_services()
    for name, service in services.items():
        for dependency in service.get("depends_on") or {}:
            assert dependency in services, f"{name} depends on unknown {dependency}"


def test_images_are_the_package_version():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    image = f"director:{version}"
    for name, service in compose_services().items():
        if service["image"].startswith("director"):
            assert service["image"] == image, name
    for deployment, container in k8s_containers():
        if container["image"].startswith("director"):
            assert container["image"] == image, deployment["metadata"]["name"]
    assert f"-t {image}" in (COMPOSE_DIR / "Dockerfile").read_text(encoding="utf-8")


def test_the_image_copies_every_package_the_project_installs():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    dockerfile = (COMPOSE_DIR / "Dockerfile").read_text(encoding="utf-8")
    copied = {line.split()[1] for line in dockerfile.splitlines() if line.startswith("COPY ")}
    assert packages <= copied, sorted(packages - copied)
    assert packages == set(PACKAGES)


# -- systemd ----------------------------------------------------------------------------


@pytest.mark.parametrize("unit", systemd_units(), ids=lambda p: p.name)
def test_systemd_units_are_complete(unit):
    sections = systemd_unit(unit)
    assert {"Unit", "Service", "Install"} <= set(sections)
    service = dict(sections["Service"])
    assert service["ExecStart"].startswith("/"), "ExecStart needs an absolute path"
    assert service["User"] == "director"
    env = systemd_env(unit)
    missing = exec_variables(unit) - set(env)
    assert not missing, f"{unit.name}: no example value for {sorted(missing)}"


def test_systemd_units_cover_every_role():
    names = {unit.name for unit in systemd_units()}
    assert {"director-dns.service", "director-api.service", "director-workers.service",
            "director-balancer@.service", "director-sim@.service"} <= names


def test_systemd_ports_match_the_code(defaults):
    env = env_file(SYSTEMD_DIR / "director.env")
    assert port_of(env["DIRECTOR_DNS_LISTEN"]) in (53, defaults["dns"])
    assert port_of(env["DIRECTOR_DNS_METRICS"]) == defaults["dns_metrics"]
    assert port_of(env["DIRECTOR_API_LISTEN"]) == defaults["api"]
    assert int(env["DIRECTOR_BALANCER_PORT"]) == defaults["balancer"]
    for site in simulator_sites(systemd_commands()):
        assert port_of(site.option("--listen")) == defaults["simulator"]
