"""The policy's objectives as Prometheus rules: what ``director slo rules`` writes.

Each objective of a service's ``slo`` block (availability, TTFT, ITL), for the service as a
whole and for each tenant it names, is one SLO instance with an error ratio: the share of
its requests that were not good, from the balancers' SLI metrics (``regions.balancer.http.
sli``; summed over every region: an objective is the service's, not a region's).

- **Recording rules** (group ``director-slo-<service>``, the alerts after them),
  labelled ``slo_service``, ``slo`` (``availability``, ``ttft``, ``itl``) and
  ``slo_tenant`` (absent: every tenant): ``director:slo_error_ratio:rate<w>`` for the
  windows the alerts read (5m, 30m, 1h, 2h, 6h, 1d, 3d) and, over the objective's
  period (averaged from the 5m ratio, as Sloth does), ``director:slo_error_ratio:period``,
  ``director:slo_objective:ratio`` and ``director:slo_error_budget_remaining:ratio``
  (1: untouched, 0: spent, below 0: overspent).
- **Alerts**, per instance, the multi-window, multi-burn-rate alerts of Google's SRE
  workbook (and Sloth): a burn rate is the error ratio over the error budget
  (1 - objective); each alert needs a long window and a short one (a twelfth of it) both
  above its rate, so it fires fast on a real burn, stops soon after it ends, and a short
  blip that the long window dilutes never fires.
  ``DirectorSLOBurnFast`` (severity ``page``): 2% of the period's budget in an hour
  (1h & 5m) or 5% in six hours (6h & 30m); ``DirectorSLOBurnSlow`` (severity ``ticket``):
  10% in a day (1d & 2h) or 10% in three days (3d & 6h). The rates follow from the
  period: over 30 days they are 14.4, 6, 3 and 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml
from prometheus_client.utils import floatToGoString

from policies.model import LatencyObjective, Policy, Service

WINDOWS = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")
WINDOW_S = {"5m": 300, "30m": 1800, "1h": 3600, "2h": 7200, "6h": 21600, "1d": 86400,
            "3d": 259200}
# (alert, severity, [(long window, short window, share of the period's budget)])
ALERTS = (
    ("DirectorSLOBurnFast", "page", (("1h", "5m", 0.02), ("6h", "30m", 0.05))),
    ("DirectorSLOBurnSlow", "ticket", (("1d", "2h", 0.10), ("3d", "6h", 0.10))),
)
REQUESTS = "director_balancer_slo_requests_total"
HISTOGRAMS = {"ttft": "director_balancer_slo_ttft_seconds",
              "itl": "director_balancer_slo_itl_seconds"}


@dataclass(frozen=True)
class SloInstance:
    """One objective of one service, for every tenant (``tenant`` "") or one."""

    service: Service
    kind: str  # availability | ttft | itl
    target: float  # the objective, a fraction
    tenant: str = ""
    threshold_s: float | None = None  # latency objectives

    @property
    def labels(self) -> dict[str, str]:
        """Its series' labels (no ``slo_tenant`` for every tenant: Prometheus drops an
        empty label, and ``slo_tenant=""`` matches its absence)."""
        labels = {"slo_service": self.service.name, "slo": self.kind}
        if self.tenant:
            labels["slo_tenant"] = self.tenant
        return labels

    @property
    def matcher(self) -> str:
        """A PromQL matcher of its series, and of no other instance's."""
        return _matcher({**self.labels, "slo_tenant": self.tenant})

    @property
    def budget(self) -> float:
        return round(1.0 - self.target, 12)

    @property
    def period_s(self) -> float:
        assert self.service.slo is not None
        return self.service.slo.period_s

    def describe(self) -> str:
        who = f" for tenant {self.tenant}" if self.tenant else ""
        if self.kind == "availability":
            what = f"{self.target * 100:g}% of requests answered without a failure"
        else:
            name = "time to first token" if self.kind == "ttft" else "mean inter-token time"
            assert self.threshold_s is not None
            what = f"{self.target * 100:g}% of requests with {name} within " \
                   f"{_duration(self.threshold_s)}"
        return f"{self.service.name}{who}: {what} over {_duration(self.period_s)}"

    def error_ratio(self, window: str) -> str:
        """PromQL: the share of the instance's requests over ``window`` that were not
        good (NaN when it had none)."""
        selector = self._selector()
        if self.kind == "availability":
            errors = _join(selector, 'outcome="error"')
            return (f"sum(rate({REQUESTS}{{{errors}}}[{window}]))\n"
                    f"/\nsum(rate({REQUESTS}{{{selector}}}[{window}]))")
        metric = HISTOGRAMS[self.kind]
        assert self.threshold_s is not None
        good = _join(selector, f'le="{floatToGoString(self.threshold_s)}"')
        return (f"1 - (\n  sum(rate({metric}_bucket{{{good}}}[{window}]))\n  /\n"
                f"  sum(rate({metric}_count{{{selector}}}[{window}]))\n)")

    def _selector(self) -> str:
        parts = []
        if self.service.models:
            alternatives = "|".join(_regex(m) for m in self.service.models)
            parts.append(f'model=~"{alternatives}"')
        if self.tenant:
            parts.append(f'tenant="{_string(self.tenant)}"')
        return ",".join(parts)


def slo_instances(policy: Policy) -> list[SloInstance]:
    """Every objective of every service, for all its tenants and for each it names."""
    found = []
    for service in policy.services:
        slo = service.slo
        if slo is None:
            continue
        objectives: list[tuple[str, float, LatencyObjective | None]] = []
        if slo.availability is not None:
            objectives.append(("availability", slo.availability, None))
        for kind, latency in (("ttft", slo.ttft), ("itl", slo.itl)):
            if latency is not None:
                objectives.append((kind, latency.target, latency))
        for tenant in ("", *slo.tenants):
            for kind, target, latency in objectives:
                found.append(SloInstance(service, kind, target, tenant,
                                         latency.threshold_s if latency else None))
    return found


def rule_file(policy: Policy, source: str) -> str:
    """The rule file's text: ``rule_groups`` as YAML, expressions as literal blocks."""
    return (f"# generated by director slo rules from {source}; do not edit\n"
            + yaml.dump(rule_groups(policy), Dumper=_RuleDumper, sort_keys=False, width=100))


class _RuleDumper(yaml.SafeDumper):
    """No anchors, and multi-line strings (expressions) as literal blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _text(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text,
                                   style="|" if "\n" in text else None)


_RuleDumper.add_representer(str, _text)


def rule_groups(policy: Policy) -> dict[str, Any]:
    """The Prometheus rule file (as a mapping to dump as YAML) for ``policy``'s SLOs."""
    groups = []
    by_service: dict[str, list[SloInstance]] = {}
    for instance in slo_instances(policy):
        by_service.setdefault(instance.service.name, []).append(instance)
    for service, instances in by_service.items():
        # one group: Prometheus evaluates a group's rules in order, so each alert reads the
        # ratios recorded in the same evaluation (groups run concurrently, in no order)
        rules = [r for i in instances for r in _recording(i)]
        rules += [a for i in instances for a in _alerts(i)]
        groups.append({"name": f"director-slo-{service}", "rules": rules})
    return {"groups": groups}


def burn_rate(instance: SloInstance, long_window: str, share: float) -> float:
    """The burn rate at which ``share`` of the period's budget goes in ``long_window``."""
    return round(share * instance.period_s / WINDOW_S[long_window], 6)


def _recording(instance: SloInstance) -> list[dict[str, Any]]:
    labels, matcher = instance.labels, instance.matcher
    rules: list[dict[str, Any]] = [
        {"record": f"director:slo_error_ratio:rate{w}", "expr": instance.error_ratio(w),
         "labels": dict(labels)} for w in WINDOWS]
    period = _duration(instance.period_s)
    rules += [
        {"record": "director:slo_error_ratio:period",
         "expr": f"avg_over_time(director:slo_error_ratio:rate5m{{{matcher}}}[{period}])",
         "labels": dict(labels)},
        {"record": "director:slo_objective:ratio", "expr": f"vector({instance.target!r})",
         "labels": dict(labels)},
        {"record": "director:slo_error_budget_remaining:ratio",
         "expr": f"1 - director:slo_error_ratio:period{{{matcher}}} / {instance.budget!r}",
         "labels": dict(labels)},
    ]
    return rules


def _alerts(instance: SloInstance) -> list[dict[str, Any]]:
    matcher = instance.matcher
    alerts = []
    for name, severity, pairs in ALERTS:
        conditions = []
        for long_window, short_window, share in pairs:
            limit = f"({burn_rate(instance, long_window, share)!r} * {instance.budget!r})"
            conditions.append(
                f"(\n  director:slo_error_ratio:rate{long_window}{{{matcher}}} > {limit}\n"
                f"  and\n  director:slo_error_ratio:rate{short_window}{{{matcher}}} > "
                f"{limit}\n)")
        rates = " or ".join(f"{burn_rate(instance, lw, s):g}x over {lw} and {sw}"
                            for lw, sw, s in pairs)
        alerts.append({
            "alert": name,
            "expr": "\nor\n".join(conditions),
            "labels": {**instance.labels, "severity": severity},
            "annotations": {
                "summary": f"{instance.service.name} {instance.kind} SLO"
                           f"{' for ' + instance.tenant if instance.tenant else ''}: error "
                           f"budget burning at {rates}",
                "description": f"Objective: {instance.describe()}. Burn rate = error ratio / "
                               f"error budget ({instance.budget:g}).",
            },
        })
    return alerts


def _matcher(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{_string(v)}"' for k, v in labels.items())


def _join(*parts: str) -> str:
    return ",".join(p for p in parts if p)


def _regex(text: str) -> str:
    """``text`` matched literally inside a PromQL regex in a double-quoted string."""
    return _string(re.sub(r"([\\.^$*+?()\[\]{}|])", r"\\\1", text))


def _string(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _duration(seconds: float) -> str:
    """A Prometheus duration: the largest whole unit."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    return f"{seconds:g}s"
