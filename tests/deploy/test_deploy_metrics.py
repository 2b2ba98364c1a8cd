"""Prometheus scrape configurations and the Grafana dashboard against the code: targets are the
deployment's processes on their real ports, and every metric queried or documented is one
the code exports."""

from __future__ import annotations

import pytest
from cli_check import simulators_by_gpu, sites_of
from deploy_files import (
    GRAFANA_DASHBOARD,
    ROOT,
    compose_commands,
    compose_services,
    k8s_containers,
    load_json,
    markdown_files,
    port_of,
    scrape_configs,
    static_targets,
)
from metric_names import defined_families, exported_samples, names_in

# -- Prometheus -------------------------------------------------------------------------


JOBS = {"director-dns", "director-api", "director-balancer", "director-gpu"}


def test_prometheus_compose_targets_match_the_compose_file(defaults):
    jobs = scrape_configs("prometheus.yml")
    assert set(jobs) == JOBS
    services = compose_services()
    (dns,) = sites_of(compose_commands(), "dns", "serve")
    assert [t for t, _ in static_targets(jobs["director-dns"])] == \
        [f"dns:{port_of(dns.option('--metrics'))}"]
    assert [t for t, _ in static_targets(jobs["director-api"])] == [f"api:{defaults['api']}"]
    balancers = {s.where.removeprefix("compose:"): s
                 for s in sites_of(compose_commands(), "region", "serve")}
    # the balancers' metrics are on their admin listener, with its token, never port 8080
    assert {t: labels["region"] for t, labels in static_targets(jobs["director-balancer"])} == \
        {f"{name}:{port_of(s.option('--admin-listen'))}": s.option("--region")
         for name, s in balancers.items()}
    assert all(port_of(s.option("--admin-listen")) != defaults["balancer"]
               for s in balancers.values())
    token = jobs["director-balancer"]["authorization"]["credentials_file"]
    for name in balancers:
        mounts = [v.split(":")[1] for v in services[name]["volumes"]]
        assert any(token.startswith(m + "/") for m in mounts), (name, token)
    sims = simulators_by_gpu(compose_commands())
    targets = {t: labels for t, labels in static_targets(jobs["director-gpu"])}
    assert set(targets) == {f"{s.where.removeprefix('compose:')}:{defaults['simulator']}"
                            for s in sims.values()}
    for target, labels in targets.items():
        site = sims[labels["gpu"]]
        assert target.startswith(site.where.removeprefix("compose:") + ":")
    for job in jobs.values():
        assert job.get("metrics_path", "/metrics") == "/metrics"
    assert all(t.split(":")[0] in services for job in jobs.values()
               for t, _ in static_targets(job))


def test_prometheus_kubernetes_jobs_scrape_named_ports():
    jobs = scrape_configs("kubernetes.yml")
    assert set(jobs) == JOBS
    ports = {}
    for deployment, container in k8s_containers():
        component = deployment["metadata"]["labels"]["app.kubernetes.io/component"]
        ports.setdefault(component, set()).update(p["name"] for p in container.get("ports") or [])
    for job in jobs.values():
        keep = {tuple(r["source_labels"]): r["regex"] for r in job["relabel_configs"]
                if r.get("action") == "keep"}
        component = keep[("__meta_kubernetes_pod_label_app_kubernetes_io_component",)]
        port = keep[("__meta_kubernetes_pod_container_port_name",)]
        assert port in ports[component], (job["job_name"], port)
        targets = {r.get("target_label") for r in job["relabel_configs"]}
        if job["job_name"] in ("director-balancer", "director-gpu"):
            assert "region" in targets
        if job["job_name"] == "director-balancer":
            assert port == "admin" and job["authorization"]["credentials_file"]


# -- Grafana and metric names -------------------------------------------------------------


def dashboard_exprs() -> list[str]:
    dashboard = load_json(GRAFANA_DASHBOARD)
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets") or []]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if v.get("definition")]
    return exprs


def test_metric_scan_agrees_with_live_registries(example):
    from director.api.metrics import ApiMetrics
    from director.dns.metrics import DnsCollector, DnsStats
    from director.refresh.metrics import RefresherMetrics
    from regions.balancer.app import build_balancer
    from regions.simulator.engine import Engine
    from regions.simulator.metrics import ServerMetrics

    api = ApiMetrics()
    RefresherMetrics(api.registry)
    families = [*api.registry.collect(), *DnsCollector(lambda: DnsStats().snapshot()).collect(),
                *ServerMetrics(Engine(), "m").registry.collect()]
    region = example.region("eu-west")
    families += build_balancer(region.name, region.gpus).metrics.registry.collect()
    defined = defined_families()
    for family in families:
        assert defined.get(family.name) == family.type, family.name


def test_dashboard_metrics_are_exported():
    used = set().union(*(names_in(expr) for expr in dashboard_exprs()))
    assert used, "no metric found in the dashboard"
    assert used <= exported_samples(), sorted(used - exported_samples())


def test_dashboard_covers_every_component():
    used = " ".join(dashboard_exprs())
    for prefix in ("director_dns_", "director_state_", "director_balancer_", "vllm:",
                   "director_api_"):
        assert prefix in used, f"no panel for {prefix}*"


def test_dashboard_is_importable():
    dashboard = load_json(GRAFANA_DASHBOARD)
    panel_ids = [p["id"] for p in dashboard["panels"]]
    assert len(panel_ids) == len(set(panel_ids))
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "region"} <= variables
    for panel in dashboard["panels"]:
        for target in panel.get("targets") or []:
            assert target["datasource"]["uid"] == "${datasource}"
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_documented_metrics_exist(path):
    mentioned = names_in(path.read_text(encoding="utf-8"))
    known = exported_samples() | set(defined_families())
    assert mentioned <= known, sorted(mentioned - known)
