"""Prometheus alert rules (deploy/prometheus/alerts-*.yml): valid, loaded by both scrape
configurations and mounted into the compose Prometheus, their metrics exported by the code,
and each one's behaviour checked by ``promtool test rules`` against
deploy/prometheus/tests/<rules>.test.yml (series in, alerts out). promtool comes with
Debian's ``prometheus`` package (``./run test`` installs it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from deploy_files import COMPOSE_FILE, PROMETHEUS_DIR, yaml_documents
from metric_names import exported_samples, names_in

RULE_FILES = sorted(PROMETHEUS_DIR.glob("alerts-*.yml"))
TEST_DIR = PROMETHEUS_DIR / "tests"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool not installed (apt-get install prometheus; ./run test does)")
    return found


def rule_expressions(path: Path) -> list[str]:
    (document,) = yaml_documents(path)
    return [rule["expr"] for group in document["groups"] for rule in group["rules"]]


def test_there_are_rule_files_and_each_has_a_test() -> None:
    assert RULE_FILES, "no deploy/prometheus/alerts-*.yml"
    for path in RULE_FILES:
        assert (TEST_DIR / f"{path.stem}.test.yml").exists(), f"{path.name}: no promtool test"


@pytest.mark.parametrize("config", ["prometheus.yml", "kubernetes.yml"])
def test_both_scrape_configurations_load_every_rule_file(config: str) -> None:
    (document,) = yaml_documents(PROMETHEUS_DIR / config)
    assert sorted(document.get("rule_files") or []) == [p.name for p in RULE_FILES]


def test_the_compose_prometheus_mounts_every_rule_file() -> None:
    (compose,) = yaml_documents(COMPOSE_FILE)
    mounts = compose["services"]["prometheus"]["volumes"]
    for path in RULE_FILES:
        assert f"../prometheus/{path.name}:/etc/prometheus/{path.name}:ro" in mounts, path.name


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_rules_use_metrics_the_code_exports(path: Path) -> None:
    used = set().union(*(names_in(expr) for expr in rule_expressions(path)))
    assert used and used <= exported_samples(), sorted(used - exported_samples())


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_promtool_checks_and_tests_the_rules(path: Path) -> None:
    tool = promtool()
    checked = subprocess.run([tool, "check", "rules", str(path)], capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run([tool, "test", "rules", f"{path.stem}.test.yml"], cwd=TEST_DIR,
                            capture_output=True, text=True, timeout=120)
    assert tested.returncode == 0, tested.stdout + tested.stderr
