"""The version alert rules (deploy/prometheus/alerts-versions.yml) with promtool: they load,
fire at the first evaluation that sees a refused model and stop when it clears
(tests/alerts-versions.test.yml), and every Prometheus configuration shipped loads them."""

from __future__ import annotations

import yaml
from deploy_files import COMPOSE_DIR, DEPLOY
from test_usage_alerts import promtool

PROMETHEUS = DEPLOY / "prometheus"
RULES = PROMETHEUS / "alerts-versions.yml"


def test_the_version_alerts_load_and_pass_their_unit_tests() -> None:
    checked = promtool("check", "rules", RULES.name)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", "tests/alerts-versions.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_prometheus_configuration_loads_the_version_alerts() -> None:
    for name in ("prometheus.yml", "kubernetes.yml"):
        config = yaml.safe_load((PROMETHEUS / name).read_text(encoding="utf-8"))
        assert RULES.name in config.get("rule_files", []), name
    compose = yaml.safe_load((COMPOSE_DIR / "compose.yaml").read_text(encoding="utf-8"))
    mounts = compose["services"]["prometheus"]["volumes"]
    assert f"../prometheus/{RULES.name}:/etc/prometheus/{RULES.name}:ro" in mounts
