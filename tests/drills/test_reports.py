# SPDX-License-Identifier: Apache-2.0
"""Reports from a recorded run: the JSON journal (always), the self-contained HTML report
with its four charts, JUnit XML; and the summary table every report leads with."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from drills.arrivals import Schedule
from drills.checks import Judge
from drills.cohorts import ClientSubnet, ResolvedCohort
from drills.loader import load_drill_text
from drills.prepare import Prepared
from drills.records import AttemptOutcome as A
from drills.reports import write_reports
from drills.result import Verdict, summary_rows, summary_text
from drills.runner import Event, Run
from drills.topology import RegionInfo, Topology
from tests.drills.drill_text import VALID
from tests.drills.synthetic import attempt, fault, ok, region_of, request


def recorded_run(verdict: Verdict = Verdict.PASSED) -> Run:
    drill = load_drill_text(VALID, "tiny.yaml")
    topology = Topology((RegionInfo("us-east", "US", ("127.0.1.1",)),
                         RegionInfo("eu-west", "EU", ("127.0.2.1",)),
                         RegionInfo("eu-central", "EU", ("127.0.3.1",))),
                        ("127.0.0.1", 5353), "chat.infer.example.com")
    subnet = ClientSubnet(ipaddress.ip_network("81.2.69.0/24"), "DE", "EU")
    cohorts = {c.name: ResolvedCohort(c, (subnet,)) for c in drill.load.cohorts}
    allowed = {"eu": frozenset({"eu-west", "eu-central"}), "us": None}
    prepared = Prepared(drill, topology, {}, {}, {}, cohorts, allowed, Schedule((), 4.0))
    records = []
    for i in range(120):
        t = i / 4
        records.append(ok("eu", t, "eu-central" if 12 <= t < 25 else "eu-west", ttft=0.2))
        records.append(ok("us", t, "us-east", ttft=0.1))
    records.append(request("eu", 9.9, attempt("eu-west", A.STREAM_CUT, t=9.9, duration=0.5)))
    records.append(request("us", 14, attempt("us-east", A.SHED, t=14, retry_after=1),
                           attempt("us-east", A.COMPLETED, t=15, n=1)))
    faults = [fault("kill", start=10.0, end=25.0)]
    faults[0].calls.append({"t": 10.0, "method": "POST", "path": "/api/v1/chaos/processes",
                            "body": {"action": "kill"}, "status": 200})
    judge = Judge(drill, allowed, region_of, topology.names)
    checks = [judge.evaluate(c, records, faults, 30.0) for c in drill.checks]
    run = Run(drill, prepared, 1_790_000_000.0, verdict, "every check held", 31.0, records,
              faults, checks=checks, events=[Event(10.0, "fault", "inject kill"),
                                             Event(25.0, "restore", "restore kill")])
    return run


def test_summary_table() -> None:
    run = recorded_run()
    rows = dict(summary_rows(run.verdict, run.reason, run.duration, run.records, run.faults,
                             run.checks))
    assert rows["verdict"] == "passed (exit 0)"
    assert rows["lost"] == "1 (1 in flight where a fault hit)"
    assert rows["residency violations"] == "0"
    assert rows["failover time (failover)"] == "2.00s"
    assert "1 shed at least once" in rows["shed"]
    text = summary_text(summary_rows(run.verdict, run.reason, run.duration, run.records,
                                     run.faults, run.checks))
    assert "FAIL nothing-lost" in text  # the cut stream is lost; this check did not exclude it


def test_journal_html_and_junit(tmp_path: Path) -> None:
    run = recorded_run(Verdict.FAILED)
    run.reason = "check(s) deviated: nothing-lost"
    files = write_reports(run, "http://127.0.0.1:8080", tmp_path, tmp_path / "junit.xml")
    assert set(files) == {"json", "html", "junit"}

    journal = json.loads(Path(files["json"]).read_text())
    assert journal["verdict"] == "failed" and journal["exit_code"] == 1
    assert len(journal["requests"]) == len(run.records)
    lost = [r for r in journal["requests"] if r["outcome"] == "lost"]
    assert len(lost) == 1 and lost[0]["in_flight_at_fault"] == "kill"
    assert journal["tally"]["by_cohort"]["eu"]["lost"] == 1
    assert journal["cohorts"]["eu"]["allowed"] == ["eu-central", "eu-west"]
    assert {c["name"] for c in journal["checks"]} == {"residency-held", "failover",
                                                      "nothing-lost"}

    html = Path(files["html"]).read_text()
    assert html.startswith("<!doctype html>") and html.count("<svg") == 4
    for title in ("Traffic share per region", "Errors and sheds", "TTFT percentiles",
                  "Fault timeline"):
        assert f"<h2>{title}</h2>" in html
    assert "src=" not in html and "<link" not in html  # self-contained
    assert "FAILED" in html and "nothing-lost" in html

    suite = ET.parse(files["junit"]).getroot()
    assert suite.tag == "testsuite" and suite.get("tests") == "4"
    failed = {c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None}
    assert failed == {"drill", "nothing-lost"}


@pytest.mark.parametrize(("verdict", "element"), [(Verdict.ERROR, "error"),
                                                  (Verdict.ABORTED, "failure")])
def test_junit_marks_errors_and_aborts_on_the_drill_case(tmp_path: Path, verdict: Verdict,
                                                        element: str) -> None:
    run = recorded_run(verdict)
    run.checks = [c for c in run.checks if c.passed]
    files = write_reports(run, "http://x", tmp_path, tmp_path / "j.xml")
    suite = ET.parse(files["junit"]).getroot()
    drill_case = next(c for c in suite.iter("testcase") if c.get("name") == "drill")
    assert drill_case.find(element) is not None


def test_the_html_report_without_matplotlib_keeps_every_table(tmp_path: Path) -> None:
    """matplotlib is an optional extra: without it the report has no charts and says so."""
    code = (
        "import sys\n"
        "sys.modules['matplotlib'] = None  # as if not installed\n"
        "from pathlib import Path\n"
        "from drills.reports import write_reports\n"
        "from tests.drills.test_reports import recorded_run\n"
        f"files = write_reports(recorded_run(), 'http://127.0.0.1:8080', Path({str(tmp_path)!r}))\n"
        "print(files['html'])\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    html = Path(out.stdout.strip()).read_text()
    assert "<svg" not in html and "director[reports]" in html
    assert "<h2>Cohorts</h2>" in html and "nothing-lost" in html
