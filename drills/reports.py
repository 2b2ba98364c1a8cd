# SPDX-License-Identifier: Apache-2.0
"""Write a run's reports: the JSON journal always, HTML and JUnit XML as asked."""

from __future__ import annotations

import time
from pathlib import Path

from drills.html import write_html
from drills.journal import journal, write_journal
from drills.junit import write_junit
from drills.runner import Run


def report_stem(run: Run) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(run.started_at))
    return f"{run.drill.name}-{stamp}"


def write_reports(run: Run, target: str, report_dir: Path,
                  junit: Path | None = None) -> dict[str, str]:
    """Write the reports; returns format -> path. The journal is written first, so it
    exists even when rendering another format fails."""
    data = journal(run, target)
    stem = report_dir / report_stem(run)
    files = {"json": str(write_journal(data, stem.with_suffix(".json")))}
    formats = run.drill.report.formats
    if "html" in formats:
        files["html"] = str(write_html(data, stem.with_suffix(".html")))
    if junit is not None or "junit" in formats:
        files["junit"] = str(write_junit(data, junit or stem.with_suffix(".junit.xml")))
    return files
