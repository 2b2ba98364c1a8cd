"""The engine decides the recorded corpus exactly as recorded: every answer, reason, TTL,
ECS scope and explain step (``Decision.as_dict()``, key order included) of a few thousand
decisions over the example policies and a policy using every feature
(``decision_corpus``). Recorded before the engine moved onto the routing core, so the
port is held to the old engine's decisions byte for byte."""

from __future__ import annotations

import difflib
import json
from collections import Counter
from dataclasses import replace

from decision_corpus import cases, decide_all, engine, policies, read_fixture


def test_decisions_equal_the_recorded_corpus() -> None:
    recorded = read_fixture()
    decided = decide_all()
    assert decided.keys() == recorded.keys()
    differing = [key for key in recorded if decided[key] != recorded[key]]
    if differing:
        key = differing[0]
        diff = "\n".join(difflib.unified_diff(
            json.dumps(json.loads(recorded[key]), indent=1).splitlines(),
            json.dumps(json.loads(decided[key]), indent=1).splitlines(),
            "recorded", "decided", lineterm=""))
        raise AssertionError(f"{len(differing)} of {len(recorded)} decisions differ; "
                             f"first {key}:\n{diff}")


def test_the_corpus_reaches_every_path() -> None:
    decisions = [json.loads(text) for text in read_fixture().values()]
    reasons = Counter(d["reason"] for d in decisions)
    assert set(reasons) == {"primary", "failover", "spillover", "all-down", "unknown-location",
                            "refused"}
    assert min(reasons.values()) >= 50, reasons
    notes = {(s["plugin"], s["note"].split(":")[0]) for d in decisions for s in d["steps"]}
    for kind in ("answer-allowed", "answer-nothing", "fallback"):
        assert any(plugin == "all-down" and kind in note for plugin, note in notes), kind
    scored = {s["plugin"] for d in decisions for s in d["steps"]
              if s["stage"] == "score" and "scores" in s["note"]}
    assert scored == {"latency", "geo", "weighted", "priority"}
    assert len(decisions) > 5000


def test_unexplained_decisions_equal_the_explained_ones() -> None:
    """What serving and the engine proof use (``explain=False``) decides every case of the
    corpus as the explained decision does, field for field, with no steps."""
    compared = 0
    for policy_name, policy in policies().items():
        explained, quiet = engine(policy_name, policy), engine(policy_name, policy)
        for service, label, snapshot_name, c, snapshot in cases(policy_name, policy):
            full = explained.decide(service, c, snapshot)
            bare = quiet.decide(service, c, snapshot, explain=False)
            assert bare.steps == ()
            assert bare == replace(full, steps=()), (policy_name, service, label,
                                                     snapshot_name)
            compared += 1
    assert compared > 5000
