"""The autoscaling examples (deploy/kubernetes/autoscaling): KEDA and the HPA scale the pool
they say on a metric the balancer exports, with a scale-down stabilization window, and the
pool's pods drain at the balancer through a route that exists before they stop."""

from __future__ import annotations

import re

from deploy_files import ROOT, yaml_documents
from metric_names import exported_samples, names_in

EXAMPLES = ROOT / "deploy" / "kubernetes" / "autoscaling"


def one(name: str, kind: str) -> dict:
    (found,) = [d for d in yaml_documents(EXAMPLES / name) if d["kind"] == kind]
    return found


def test_keda_and_the_hpa_scale_the_pool_on_the_balancers_signal() -> None:
    pool = one("vllm-pool.yaml", "StatefulSet")
    keda = one("keda-scaledobject.yaml", "ScaledObject")
    hpa = one("hpa-external.yaml", "HorizontalPodAutoscaler")
    for target in (keda["spec"]["scaleTargetRef"], hpa["spec"]["scaleTargetRef"]):
        assert (target["kind"], target["name"]) == ("StatefulSet", pool["metadata"]["name"])
    (trigger,) = [t for t in keda["spec"]["triggers"] if t["type"] == "prometheus"]
    assert names_in(trigger["metadata"]["query"]) == {"director_desired_replicas"}
    assert "director_desired_replicas" in exported_samples()
    (metric,) = hpa["spec"]["metrics"]
    assert metric["external"]["metric"]["name"] == "director_desired_replicas"
    assert set(metric["external"]["metric"]["selector"]["matchLabels"]) == {"region", "model"}
    behaviours = (keda["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"],
                  hpa["spec"]["behavior"])
    for behaviour in behaviours:
        assert behaviour["scaleDown"]["stabilizationWindowSeconds"] >= 60
    assert hpa["spec"]["minReplicas"] >= 1


def test_the_adapter_serves_the_metric_the_hpa_reads() -> None:
    (rules,) = yaml_documents(EXAMPLES / "prometheus-adapter-rules.yaml")
    (rule,) = rules["rules"]["external"]
    assert rule["name"]["as"] == "director_desired_replicas"
    assert names_in(rule["seriesQuery"]) == {"director_desired_replicas"}


def test_a_pod_drains_at_the_balancer_before_it_stops() -> None:
    pod = one("vllm-pool.yaml", "StatefulSet")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    hook = " ".join(container["lifecycle"]["preStop"]["exec"]["command"])
    assert "/_admin/drain" in hook
    wait = int(re.search(r'\\"wait_s\\": (\d+)', hook)[1])
    assert pod["terminationGracePeriodSeconds"] > wait
    admin = (ROOT / "regions" / "balancer" / "http" / "admin.py").read_text()
    assert '"/_admin/drain"' in admin and '"wait_s"' in admin
