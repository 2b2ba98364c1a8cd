"""docs/operator-guide.md against the code: queue names, the failover arithmetic of the
example policy, and the topics an operator needs."""

from __future__ import annotations

import re

from deploy_files import OPERATOR_GUIDE

from workers.schedule import region_queue
from workers.targets import probe_targets

# -- the operator guide ----------------------------------------------------------------


def test_operator_guide_queue_names_are_real(example):
    text = OPERATOR_GUIDE.read_text(encoding="utf-8")
    queues = set(re.findall(r"probes\.[a-z0-9<>-]+", text))
    assert queues, "the guide shows no probe queue"
    real = {region_queue(name) for name in example.region_names} | {region_queue("<region>")}
    assert queues <= real, sorted(queues - real)


def test_operator_guide_failover_arithmetic_matches_the_example(example):
    text = OPERATOR_GUIDE.read_text(encoding="utf-8")
    targets = probe_targets(example, balancer_port=8080).balancers
    fall, interval, timeout = targets[0].fall, targets[0].interval, targets[0].timeout
    assert all((t.fall, t.interval, t.timeout) == (fall, interval, timeout) for t in targets)
    detection = fall * interval + timeout
    assert f"{fall} × {interval:g} s + {timeout:g} s = {detection:g} s" in text
    for service in example.services:
        assert f"{service.name}" in text
        assert f"{service.ttl:g} s" in text


def test_operator_guide_covers_its_topics():
    text = OPERATOR_GUIDE.read_text(encoding="utf-8").lower()
    for topic in ("glue", "$origin", "ttl", "fall", "redis", "--no-beat", "policy check",
                  "fmt --check", "put /api/v1/policy", "rollback", "director api token",
                  "/metrics"):
        assert topic in text, topic
