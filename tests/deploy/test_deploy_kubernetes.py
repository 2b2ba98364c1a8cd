"""The Kubernetes manifests (deploy/kubernetes) against the code and the policy they carry:
probes on real routes and ports, resources, Services that reach their pods, the policy's
addresses on the Services' fixed ClusterIPs."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
from cli_check import (
    director_start,
    simulator_sites,
    simulator_start,
    simulators_by_gpu,
    sites_of,
)
from deploy_files import (
    K8S_DIR,
    ROOT,
    CommandSite,
    k8s_commands,
    k8s_containers,
    k8s_kind,
    k8s_manifest_files,
    k8s_objects,
    port_of,
    yaml_documents,
)

# -- Kubernetes ---------------------------------------------------------------------------


def pod_spec(deployment) -> dict:
    return deployment["spec"]["template"]["spec"]


def test_kustomization_lists_every_manifest():
    (kustomization,) = yaml_documents(K8S_DIR / "kustomization.yaml")
    assert sorted(kustomization["resources"]) == \
        sorted(f"manifests/{p.name}" for p in k8s_manifest_files())
    assert kustomization["namespace"] == "director"


def test_kubernetes_objects_live_in_the_namespace():
    (namespace,) = k8s_kind("Namespace")
    for obj in k8s_objects():
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == namespace["metadata"]["name"], obj


@pytest.mark.parametrize("deployment", k8s_kind("Deployment"),
                         ids=lambda d: d["metadata"]["name"])
def test_kubernetes_deployments_have_probes_and_resources(deployment):
    spec = deployment["spec"]
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    for container in pod_spec(deployment)["containers"]:
        for probe in ("readinessProbe", "livenessProbe"):
            assert probe in container, f"{container['name']}: no {probe}"
        for bound in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(container["resources"][bound]), bound
        ports = {p["name"]: p for p in container.get("ports") or []}
        for probe in (container["readinessProbe"], container["livenessProbe"]):
            action = probe.get("httpGet") or probe.get("tcpSocket")
            if action is not None:
                assert action["port"] in ports, f"probe on unknown port {action['port']}"
        mounts = {m["name"] for m in container.get("volumeMounts") or []}
        assert mounts <= {v["name"] for v in pod_spec(deployment).get("volumes") or []}


def route_paths(path: str, pattern: str) -> set[str]:
    return set(re.findall(pattern, (ROOT / path).read_text(encoding="utf-8")))


def test_kubernetes_probes_hit_real_routes():
    routes = {
        "api": route_paths("director/api/routes/public.py", r'@router\.get\("([^"]+)"'),
        "balancer": route_paths("regions/balancer/app.py", r'add_get\("([^"]+)"'),
        "gpu": route_paths("regions/simulator/server.py", r'add_get\("([^"]+)"'),
    }
    assert "/healthz" in routes["api"] and "/health" in routes["gpu"]
    for deployment, container in k8s_containers():
        component = deployment["metadata"]["labels"]["app.kubernetes.io/component"]
        for probe in (container["readinessProbe"], container["livenessProbe"]):
            if component == "dns":
                assert probe["tcpSocket"]["port"] == "dns-tcp"
            elif component in routes:
                assert probe["httpGet"]["path"] in routes[component], deployment["metadata"]


def test_kubernetes_ports_match_the_code(defaults):
    for deployment, container in k8s_containers():
        ports = {(p["containerPort"], p.get("protocol", "TCP"))
                 for p in container.get("ports") or []}
        site = CommandSite("k8s", tuple(str(t) for t in container["command"]))
        if director_start(site.argv) is None and simulator_start(list(site.argv)) is None:
            continue
        for option in ("--listen", "--metrics"):
            if site.option(option):
                assert (port_of(site.option(option)), "TCP") in ports, (deployment["metadata"],
                                                                         option)
    (dns,) = sites_of(k8s_commands(), "dns", "serve")
    assert port_of(dns.option("--listen")) in (53, defaults["dns"])
    assert port_of(dns.option("--metrics")) == defaults["dns_metrics"]
    (api,) = sites_of(k8s_commands(), "api", "serve")
    assert port_of(api.option("--listen")) == defaults["api"]
    assert int(api.option("--balancer-port")) == defaults["balancer"]
    (workers,) = sites_of(k8s_commands(), "workers")
    assert int(workers.env["DIRECTOR_BALANCER_PORT"]) == defaults["balancer"]
    for site in sites_of(k8s_commands(), "region", "serve"):
        assert port_of(site.option("--listen")) == defaults["balancer"]
    for site in simulator_sites(k8s_commands()):
        assert port_of(site.option("--listen")) == defaults["simulator"]


def test_kubernetes_services_reach_their_pods():
    deployments = k8s_kind("Deployment")
    for service in k8s_kind("Service"):
        selector = service["spec"]["selector"]
        pods = [d for d in deployments
                if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()]
        assert pods, f"service {service['metadata']['name']} selects no pod"
        names = {p["name"] for d in pods for c in pod_spec(d)["containers"]
                 for p in c.get("ports") or []}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in names, (service["metadata"]["name"], port)


def test_kubernetes_addresses_match_the_policy(k8s_policy, defaults):
    services = {s["metadata"]["name"]: s["spec"] for s in k8s_kind("Service")}
    (ns,) = k8s_policy.zone.nameservers
    assert [str(a) for a in ns.addresses] == [services["dns"]["clusterIP"]]
    assert {(p["port"], p["protocol"]) for p in services["dns"]["ports"]} >= {(53, "UDP"),
                                                                               (53, "TCP")}
    for region in k8s_policy.regions:
        spec = services[f"balancer-{region.name}"]
        assert spec["clusterIP"] == region.endpoints_v4[0]
        assert [p["port"] for p in spec["ports"]] == [defaults["balancer"]]
        for gpu in region.gpus:
            url = urlsplit(gpu.url)
            assert [p["port"] for p in services[url.hostname]["ports"]] == [url.port]
    fixed = [s["clusterIP"] for s in services.values() if "clusterIP" in s]
    assert len(fixed) == len(set(fixed))


def test_kubernetes_runs_one_balancer_per_region_and_one_simulator_per_gpu(k8s_policy):
    balancers = sites_of(k8s_commands(), "region", "serve")
    assert sorted(s.option("--region") for s in balancers) == sorted(k8s_policy.region_names)
    gpus = {gpu.name: gpu for region in k8s_policy.regions for gpu in region.gpus}
    sims = simulators_by_gpu(k8s_commands())
    assert sorted(sims) == sorted(gpus)
    for name, site in sims.items():
        assert tuple(site.options("--model")) == gpus[name].models


def test_kubernetes_policy_mounts_name_existing_keys():
    (configmap,) = k8s_kind("ConfigMap")
    for deployment in k8s_kind("Deployment"):
        for volume in pod_spec(deployment).get("volumes") or []:
            for item in volume.get("configMap", {}).get("items") or []:
                assert item["key"] in configmap["data"], (deployment["metadata"]["name"], item)
