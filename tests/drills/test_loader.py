# SPDX-License-Identifier: Apache-2.0
"""Drill files: a valid one reads into the model; a corpus of broken ones, each reported at
the line and column of the offending node, with the key path and, where close, a hint."""

from __future__ import annotations

import pytest

from drills.errors import DrillFileError
from drills.loader import load_drill, load_drill_text
from drills.model import CheckType, FaultType, Tolerance, When
from tests.drills.drill_text import VALID


def test_valid_drill_reads_into_the_model() -> None:
    drill = load_drill_text(VALID, "tiny.yaml")
    assert drill.name == "tiny"
    assert drill.duration == 30.0
    (fault,) = drill.faults
    assert (fault.type, fault.start, fault.duration, fault.target) == \
        (FaultType.REGION_KILL, 10.0, 15.0, "eu_west")
    assert fault.params == {"include": ["balancer", "gpus"]}
    checks = {c.name: c for c in drill.checks}
    assert checks["residency-held"].when is When.CONTINUOUS
    assert checks["residency-held"].expect == Tolerance(max=0)
    assert checks["failover"].type is CheckType.FAILOVER_TIME
    assert checks["failover"].expect.max == 10.0  # ${deadline} from vars, as a duration
    assert checks["nothing-lost"].expect == Tolerance(max=0)
    assert drill.cohort("eu").resident and not drill.cohort("us").resident
    assert drill.fault_ttl(fault) == 30.0  # duration + the default 15 s margin
    assert drill.report.formats[0] == "json"


def test_variables_can_be_overridden() -> None:
    drill = load_drill_text(VALID, "tiny.yaml", variables={"deadline": "4s"})
    assert next(c for c in drill.checks if c.name == "failover").expect.max == 4.0


def replace(old: str, new: str) -> str:
    assert old in VALID, old
    return VALID.replace(old, new, 1)


# id -> (drill text, "line:col", a fragment of the message, a fragment of the hint or None)
BROKEN = {
    "yaml-syntax": (replace("  title: A tiny drill", "  title: [unclosed"), "6:11",
                    "invalid YAML", None),
    "tab-indent": (replace("  name: tiny", "\tname: tiny"), "4:1", "invalid YAML", None),
    "empty-file": ("", "1:1", "empty drill file", None),
    "not-a-mapping": ("- just\n- a list\n", "1:1", "expected a drill document", None),
    "wrong-api-version": (replace("drill/v1", "drill/v2"), "1:13",
                          "apiVersion: expected one of drill/v1, got 'drill/v2'",
                          "did you mean 'drill/v1'"),
    "missing-kind": (replace("kind: Drill\n", ""), "1:1", "missing required key 'kind'", None),
    "unknown-top-key": (replace("hypothesis: it holds", "hypotesis: it holds"), "6:1",
                        "unknown key 'hypotesis'", "did you mean 'hypothesis'"),
    "bad-name": (replace("name: tiny", "name: Tiny Drill"), "4:9", "metadata.name", None),
    "duplicate-key": (replace("  title: A tiny drill", "  title: A\n  title: B"), "6:3",
                      "duplicate key 'title'", None),
    "share-not-a-number": (replace("share: 0.5}\n    - {name: us", "share: half}\n    - "
                                   "{name: us"), "21:76",
                           "load.cohorts[0].share: expected a number > 0 and <= 1, got 'half'",
                           None),
    "share-out-of-range": (replace("share: 0.5}\n", "share: 1.5}\n"), "21:76",
                           "expected a number > 0 and <= 1, got 1.5", None),
    "shares-do-not-add-up": (replace("countries: [US], share: 0.5", "countries: [US], "
                                     "share: 0.4"), "21:5", "cohort shares add up to 0.9",
                             None),
    "bad-country": (replace("countries: [DE]", "countries: [Germany]"), "21:30",
                    "load.cohorts[0].countries[0]: expected an ISO 3166 country code", None),
    "cohort-without-location": (replace("countries: [US], ", ""), "22:7",
                                "cohort 'us' needs countries or subnets", None),
    "bad-subnet": (replace("countries: [US]", "subnets: [10.0.0.1/24]"), "22:28",
                   "invalid subnet '10.0.0.1/24'", None),
    "bad-duration": (replace("duration: 10s}", "duration: ten}"), "18:32",
                     "load.phases[0].duration: expected a duration", None),
    "negative-rps": (replace("rps: 4}", "rps: -4}"), "16:15", "load.rate.rps: expected a "
                     "number > 0", None),
    "bad-multiplier": (replace("{name: steady, duration: 10s}",
                               "{name: steady, duration: 10s, rps: eightx}"), "18:42",
                       "expected a multiplier like 8x", None),
    "rate-and-trace": (replace("  rate: {rps: 4}", "  rate: {rps: 4}\n  trace: {file: "
                               "azure-llm-2023/AzureLLMInferenceTrace_conv.csv.gz}"), "14:3",
                       "give exactly one of 'rate'", None),
    "no-rate-nor-trace": (replace("  rate: {rps: 4}\n", ""), "14:3",
                          "give exactly one of 'rate'", None),
    "trace-not-found": (replace("  rate: {rps: 4}", "  trace: {file: nope.csv.gz}"), "16:17",
                        "load.trace.file: file not found", "DIRECTOR_TRACES"),
    "unknown-fault-type": (replace("type: region.kill", "type: region.kil"), "25:11",
                           "method[0].type: expected one of", "did you mean 'region.kill'"),
    "unknown-target": (replace("target: eu_west", "target: eu_wets"), "26:13",
                       "unknown target 'eu_wets'", "did you mean 'eu_west'"),
    "target-kind-mismatch": (replace("type: region.kill", "type: gpu.slow"), "26:13",
                             "a gpu.slow fault needs a gpu target", None),
    "unknown-phase": (replace("start: {phase: outage}", "start: {phase: outgae}"), "27:20",
                      "unknown phase 'outgae'", "did you mean 'outage'"),
    "fault-after-load": (replace("duration: 15s\nchecks", "duration: 25s\nchecks"), "28:15",
                         "fault 'kill' ends at 35s, after the load ends (30s)", None),
    "fault-too-long": (replace("duration: 15s\nchecks", "duration: 20m\nchecks"), "28:15",
                       "at most 600s", None),
    "outside-blast-radius": (replace("select: {region: eu-west}}",
                                     "select: {region: us-east}}"), "26:13",
                             "outside the blast radius (eu-west)", None),
    "fault-param-unknown": (replace("duration: 15s\nchecks",
                                    "duration: 15s\n    params: {factr: 2}\nchecks"), "29:14",
                            "unknown key 'factr'", None),
    "spike-needs-multiplier": (replace("type: region.kill\n    target: eu_west\n",
                                       "type: traffic.spike\n"), "24:5",
                               "missing params: multiplier", None),
    "unknown-variable": (replace('"${deadline}"', '"${dedline}"'), "32:20",
                         "unknown variable 'dedline'", "did you mean 'deadline'"),
    "unknown-check-type": (replace("type: lost}", "type: lots}"), "33:32",
                           "expected one of residency", None),
    "unknown-cohort": (replace("cohorts: [eu],", "cohorts: [europe],"), "31:66",
                       "unknown cohort 'europe'", None),
    "failover-unknown-fault": (replace("fault: kill,", "fault: kil,"), "31:50",
                               "unknown fault id 'kil'", "did you mean 'kill'"),
    "residency-tolerance": (replace("{name: residency-held, type: residency}",
                                    "{name: residency-held, type: residency, "
                                    "expect: {violations: 2}}"), "30:66",
                            "expected exactly 0, got 2", None),
    "ttft-without-bound": (replace("{name: nothing-lost, type: lost}",
                                   "{name: p99, type: ttft}"), "33:5",
                           "a ttft check needs expect", None),
    "field-of-another-type": (replace("{name: nothing-lost, type: lost}",
                                      "{name: nothing-lost, type: lost, quantile: 0.9}"),
                              "33:48", "a lost check has no 'quantile'", None),
    "duplicate-check": (replace("{name: nothing-lost, type: lost}",
                                "{name: failover, type: lost}"), "33:5",
                        "duplicate check name 'failover'", None),
    "guard-unknown-check": (replace("{name: budget, type: error_ratio, expect: {max: 0.5}}",
                                    "{check: residency-hold}"), "36:15",
                            "unknown check 'residency-hold'", "did you mean 'residency-held'"),
    "guard-without-bound": (replace("expect: {max: 0.5}}", "window: 5s}"), "36:7",
                            "a guard needs expect", None),
    "start-cycle": (replace("start: {phase: outage}", "start: {after: kill}"), "27:20",
                    "start times form a cycle", None),
}


@pytest.mark.parametrize(("text", "where", "message", "hint"), BROKEN.values(),
                         ids=BROKEN.keys())
def test_broken_drill_is_reported_where_it_is_broken(text: str, where: str, message: str,
                                                     hint: str | None) -> None:
    with pytest.raises(DrillFileError) as caught:
        load_drill_text(text, "broken.yaml")
    rendered = caught.value.render()
    first = next((d for d in caught.value.diagnostics if message in d.message), None)
    assert first is not None, rendered
    assert f"{first.pos.line}:{first.pos.col}" == where, rendered
    assert f"broken.yaml:{where}: error: " in rendered
    if hint is not None:
        assert hint in (first.hint or ""), rendered


def test_rendered_error_shows_the_line_with_a_caret() -> None:
    text, _, _, _ = BROKEN["share-not-a-number"]
    with pytest.raises(DrillFileError) as caught:
        load_drill_text(text, "broken.yaml")
    lines = caught.value.render().splitlines()
    assert lines[0].startswith("broken.yaml:21:76: error: load.cohorts[0].share")
    assert lines[1].endswith("share: half}")
    caret = lines[2]
    assert caret.index("^") == lines[1].index("half") and caret.count("^") == 4


def test_every_schema_error_is_reported_at_once() -> None:
    text = replace("type: region.kill", "type: region.kil")
    text = text.replace("countries: [DE]", "countries: [Germany]")
    with pytest.raises(DrillFileError) as caught:
        load_drill_text(text, "broken.yaml")
    assert len(caught.value.diagnostics) == 2


def test_missing_file_and_oversized_file(tmp_path) -> None:
    with pytest.raises(DrillFileError, match="cannot read drill file"):
        load_drill(tmp_path / "nope.yaml")
    big = tmp_path / "big.yaml"
    big.write_text("#" * (1 << 20 + 1))
    with pytest.raises(DrillFileError, match="the limit is"):
        load_drill(big)
