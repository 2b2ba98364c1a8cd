# SPDX-License-Identifier: Apache-2.0
"""JUnit XML for CI: one test case per check, plus one for the drill as a whole."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any


def junit_xml(journal: dict[str, Any]) -> str:
    name = journal["drill"]["name"]
    checks = journal["checks"]
    verdict = journal["verdict"]
    failures = sum(1 for c in checks if not c["passed"]) + (verdict in ("failed", "aborted"))
    errors = 1 if verdict == "error" else 0
    suite = ET.Element("testsuite", name=f"drill.{name}", tests=str(len(checks) + 1),
                       failures=str(failures), errors=str(errors),
                       time=f"{journal['duration']:.3f}", timestamp=journal["started_at"])
    props = ET.SubElement(suite, "properties")
    for key in ("verdict", "exit_code", "reason", "target"):
        ET.SubElement(props, "property", name=key, value=str(journal[key]))
    whole = ET.SubElement(suite, "testcase", classname=f"drill.{name}", name="drill",
                          time=f"{journal['duration']:.3f}")
    if verdict == "error":
        ET.SubElement(whole, "error", message=journal["reason"], type="error").text = \
            "\n".join(journal["errors"])
    elif verdict in ("failed", "aborted"):
        ET.SubElement(whole, "failure", message=journal["reason"], type=verdict)
    for c in checks:
        case = ET.SubElement(suite, "testcase", classname=f"drill.{name}", name=c["name"],
                             time="0")
        if not c["passed"]:
            failure = ET.SubElement(case, "failure", type=c["type"],
                                    message=f"{c['detail']} (expected {c['expected']})")
            failure.text = "\n".join(c["evidence"])
    ET.SubElement(suite, "system-out").text = "\n".join(
        f"{row['what']}: {row['value']}" for row in journal["summary"])
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, "unicode") + "\n"


def write_junit(journal: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(junit_xml(journal))
    return path
