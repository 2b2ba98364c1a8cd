"""The usage log's alert rules (deploy/prometheus/alerts-usage.yml) with promtool: they
load, fire on a lagging reader at the documented thresholds (tests/alerts-usage.test.yml),
and every Prometheus configuration shipped loads them."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml
from deploy_files import COMPOSE_DIR, DEPLOY

PROMETHEUS = DEPLOY / "prometheus"
RULES = PROMETHEUS / "alerts-usage.yml"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("promtool") is None:
        pytest.skip("promtool not installed (Debian package prometheus; ./run test installs it)")
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=60,
                          cwd=PROMETHEUS)


def test_the_usage_alerts_load_and_pass_their_unit_tests() -> None:
    checked = promtool("check", "rules", RULES.name)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", "tests/alerts-usage.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_prometheus_configuration_loads_the_usage_alerts() -> None:
    for name in ("prometheus.yml", "kubernetes.yml"):
        config = yaml.safe_load((PROMETHEUS / name).read_text(encoding="utf-8"))
        assert RULES.name in config.get("rule_files", []), name
    compose = yaml.safe_load((COMPOSE_DIR / "compose.yaml").read_text(encoding="utf-8"))
    mounts = compose["services"]["prometheus"]["volumes"]
    assert f"../prometheus/{RULES.name}:/etc/prometheus/{RULES.name}:ro" in mounts
