"""``director slo rules``: the rule file promtool checks, and ``promtool test rules``
proving each burn-rate alert fires within its window on a burn and stays silent on a blip
(series in, alerts out, over three days of history first: a long window without history
would see a blip as a burn)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from director.slo.rules import burn_rate, rule_file, slo_instances
from policies import load_policy

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "policies" / "examples" / "tenants" / "tenants.dp"
SERVICE = "chat.infer.example.com"
MODEL = "llama-3-8b"
STEP = 5  # minutes between samples and rule evaluations
HISTORY = 73 * 60  # minutes of good traffic before anything happens (longer than 3d)
PER_STEP = 500  # requests per step


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is needed (apt-get install prometheus; ./run test does)"
    return found


@pytest.fixture(scope="module")
def rules(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("slo") / "slo-rules.yml"
    path.write_text(rule_file(load_policy(str(POLICY)), POLICY.name))
    return path, yaml.safe_load(path.read_text())


def alert(rules: dict[str, Any], name: str, kind: str, tenant: str = "") -> dict[str, Any]:
    """What promtool should see of alert ``name`` of the ``kind`` SLO."""
    for group in rules["groups"]:
        for rule in group["rules"]:
            labels = rule.get("labels", {})
            if (rule.get("alert") == name and labels["slo"] == kind
                    and labels.get("slo_tenant", "") == tenant):
                return {"exp_labels": labels, "exp_annotations": rule["annotations"]}
    raise AssertionError(f"no {name} for {kind}/{tenant!r}")


def steps(minutes: int) -> int:
    return minutes // STEP


def counter(*parts: tuple[int, int]) -> str:
    """A counter's values from 0 at time 0: then (steps, increase per step) parts, in
    promtool's notation (``a+bxn`` is n+1 values from a)."""
    out, value = ["0"], 0
    for count, increase in parts:
        out.append(f"{value + increase}+{increase}x{count - 1}")
        value += increase * count
    return " ".join(out)


def requests(ok: str, error: str, tenant: str = "") -> list[dict[str, str]]:
    base = f'model="{MODEL}",tenant="{tenant}"'
    return [{"series": f'director_balancer_slo_requests_total{{{base},outcome="ok"}}',
             "values": ok},
            {"series": f'director_balancer_slo_requests_total{{{base},outcome="error"}}',
             "values": error}]


def ttft(count: str, within: str) -> list[dict[str, str]]:
    base = f'model="{MODEL}",tenant=""'
    return [{"series": f"director_balancer_slo_ttft_seconds_count{{{base}}}", "values": count},
            {"series": f'director_balancer_slo_ttft_seconds_bucket{{{base},le="1.0"}}',
             "values": within}]


def at(minutes: int) -> str:
    return f"{minutes}m"


def run_promtool(rules_path: Path, tests: list[dict[str, Any]], tmp_path: Path) -> None:
    spec = {"rule_files": [str(rules_path)], "evaluation_interval": f"{STEP}m",
            "tests": tests}
    test_file = tmp_path / "slo.test.yml"
    test_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    done = subprocess.run([promtool(), "test", "rules", str(test_file)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rule_file_is_valid_and_covers_every_objective(rules) -> None:
    path, document = rules
    checked = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    instances = slo_instances(load_policy(str(POLICY)))
    # availability, ttft and itl, for the service and for acme
    assert {(i.kind, i.tenant) for i in instances} == {
        (k, t) for k in ("availability", "ttft", "itl") for t in ("", "acme")}
    alerts = [r for g in document["groups"] for r in g["rules"] if "alert" in r]
    assert len(alerts) == 2 * len(instances)
    assert {burn_rate(instances[0], w, s) for w, s in
            (("1h", 0.02), ("6h", 0.05), ("1d", 0.1), ("3d", 0.1))} == {14.4, 6.0, 3.0, 1.0}


def test_a_fast_burn_pages_within_the_short_window_and_a_blip_does_not(rules, tmp_path):
    path, document = rules
    after = HISTORY + 60
    burn = requests(counter((steps(after + 60), PER_STEP)),
                    counter((steps(HISTORY), 0), (steps(120), PER_STEP // 2)))
    blip = requests(counter((steps(after + 60), PER_STEP)),
                    counter((steps(HISTORY), 0), (1, 20), (steps(115), 0)))
    page = alert(document, "DirectorSLOBurnFast", "availability")
    ticket = alert(document, "DirectorSLOBurnSlow", "availability")
    run_promtool(path, [
        {"interval": f"{STEP}m", "input_series": burn, "alert_rule_test": [
            {"eval_time": at(HISTORY - STEP), "alertname": "DirectorSLOBurnFast",
             "exp_alerts": []},
            # a third of the requests failing: paged one step (5 minutes) in; the ticket
            # once the day's window is over 3x too (a step later)
            {"eval_time": at(HISTORY + STEP), "alertname": "DirectorSLOBurnFast",
             "exp_alerts": [page]},
            {"eval_time": at(HISTORY + STEP), "alertname": "DirectorSLOBurnSlow",
             "exp_alerts": []},
            {"eval_time": at(HISTORY + 3 * STEP), "alertname": "DirectorSLOBurnSlow",
             "exp_alerts": [ticket]},
        ]},
        {"interval": f"{STEP}m", "input_series": blip, "alert_rule_test": [
            # 20 failures once (4% of five minutes, 0.3% of the hour): never an alert
            *({"eval_time": at(HISTORY + m), "alertname": name, "exp_alerts": []}
              for m in (STEP, 2 * STEP, 30, 60)
              for name in ("DirectorSLOBurnFast", "DirectorSLOBurnSlow")),
        ]},
    ], tmp_path)


def test_a_slow_burn_opens_a_ticket_within_a_day_and_never_pages(rules, tmp_path):
    """0.4% failing (4x the budget of 99.9%): over 3x on the day's window after 18 hours,
    never 6x or 14.4x."""
    path, document = rules
    total = HISTORY + 20 * 60
    ok_steps = steps(total)
    slow = requests(counter((ok_steps, PER_STEP)),
                    counter((steps(HISTORY), 0), (steps(20 * 60), 2)))
    ticket = alert(document, "DirectorSLOBurnSlow", "availability")
    run_promtool(path, [
        {"interval": f"{STEP}m", "input_series": slow, "alert_rule_test": [
            {"eval_time": at(HISTORY + 17 * 60), "alertname": "DirectorSLOBurnSlow",
             "exp_alerts": []},
            {"eval_time": at(HISTORY + 19 * 60), "alertname": "DirectorSLOBurnSlow",
             "exp_alerts": [ticket]},
            *({"eval_time": at(HISTORY + h * 60), "alertname": "DirectorSLOBurnFast",
               "exp_alerts": []} for h in (1, 6, 12, 19)),
        ]},
    ], tmp_path)


def test_a_ttft_burn_pages_and_a_tenants_own_slo_sees_only_its_requests(rules, tmp_path):
    path, document = rules
    after = HISTORY + 60
    # every stream past a second to first token: a p95 objective's budget is 5%, so a
    # 14.4x burn is 72% of streams slow over the hour, and even a total failure pages only
    # once it fills 72% of that window (43 minutes), not five minutes in
    slow_first_tokens = ttft(counter((steps(after), PER_STEP)),
                             counter((steps(HISTORY), PER_STEP), (steps(60), 0)))
    # acme's requests alone fail: its own SLO pages five minutes in; the service's, whose
    # requests are 20 times as many, is not burning fast enough to page yet
    acme_fails = [*requests(counter((steps(after), PER_STEP * 20)),
                            counter((steps(after), 0))),
                  *requests(counter((steps(after), PER_STEP)),
                            counter((steps(HISTORY), 0), (steps(60), PER_STEP)), "acme")]
    run_promtool(path, [
        {"interval": f"{STEP}m", "input_series": slow_first_tokens, "alert_rule_test": [
            {"eval_time": at(HISTORY + 40), "alertname": "DirectorSLOBurnFast",
             "exp_alerts": []},
            {"eval_time": at(HISTORY + 45), "alertname": "DirectorSLOBurnFast",
             "exp_alerts": [alert(document, "DirectorSLOBurnFast", "ttft")]},
        ]},
        {"interval": f"{STEP}m", "input_series": acme_fails, "alert_rule_test": [
            {"eval_time": at(HISTORY + STEP), "alertname": "DirectorSLOBurnFast",
             "exp_alerts": [alert(document, "DirectorSLOBurnFast", "availability", "acme")]},
        ]},
    ], tmp_path)


def test_the_command_writes_the_file_and_refuses_a_broken_policy(tmp_path: Path) -> None:
    out = tmp_path / "rules.yml"
    done = subprocess.run([sys.executable, "-m", "director", "slo", "rules", str(POLICY),
                           "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "wrote 6 SLOs (12 alerts)" in done.stderr
    assert out.read_text().startswith("# generated by director slo rules from tenants.dp")
    broken = tmp_path / "broken.dp"
    broken.write_text(POLICY.read_text().replace("ttft p95 1s", "ttft p95 1.2s"))
    done = subprocess.run([sys.executable, "-m", "director", "slo", "rules", str(broken)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "1.2s is not a bound of the balancer's latency histograms" in done.stderr
