"""Service level objectives: the policy's ``slo`` blocks as Prometheus recording rules and
multi-window, multi-burn-rate alerts (``rules``), for ``director slo rules``."""

from director.slo.rules import SloInstance, rule_file, rule_groups, slo_instances

__all__ = ["SloInstance", "rule_file", "rule_groups", "slo_instances"]
