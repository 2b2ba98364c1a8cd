# SPDX-License-Identifier: Apache-2.0
"""The HTML report: one self-contained file (inline CSS and SVG charts), from the journal.

The charts need matplotlib (``pip install 'director[reports]'``; ``./run`` installs it);
without it the report has every table and says where the charts would be.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

NO_CHARTS = ("<p><em>Charts need matplotlib: <code>pip install 'director[reports]'</code>."
             "</em></p>")


def _charts(journal: dict[str, Any]) -> dict[str, str] | None:
    try:
        from drills.charts import all_charts  # matplotlib is an optional extra
    except ModuleNotFoundError as exc:
        if exc.name != "matplotlib" and not (exc.name or "").startswith("matplotlib."):
            raise
        return None
    return all_charts(journal)

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.15em;margin-top:1.8em;
border-bottom:1px solid #ddd} table{border-collapse:collapse;margin:.5em 0;width:100%}
td,th{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f4f4f4} .verdict{display:inline-block;padding:3px 12px;border-radius:4px;
color:#fff;font-weight:600} .passed{background:#2e7d32} .failed{background:#c62828}
.aborted{background:#ef6c00} .error{background:#6a1b9a} .pass{color:#2e7d32;font-weight:600}
.fail{color:#c62828;font-weight:600} code,pre{font:12px ui-monospace,monospace}
pre{background:#f7f7f7;padding:6px;overflow-x:auto;max-height:20em} .muted{color:#777}
svg{max-width:100%;height:auto}
"""


def _table(headers: list[str], rows: list[list[Any]], raw: bool = False) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c if raw else escape(str(c))}</td>" for c in row)
                   + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def render_html(journal: dict[str, Any]) -> str:
    d = journal["drill"]
    verdict = journal["verdict"]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>drill "
             f"{escape(d['name'])}: {escape(verdict)}</title><style>{CSS}</style></head><body>",
             f"<h1>{escape(d['title'])}</h1>",
             f"<p><span class='verdict {escape(verdict)}'>{escape(verdict.upper())}</span> "
             f"exit {journal['exit_code']} &middot; {escape(journal['reason'])}</p>",
             f"<p class='muted'>{escape(d['file'])} &middot; started "
             f"{escape(journal['started_at'])} &middot; {journal['duration']:.1f}s &middot; "
             f"target {escape(journal['target'])}</p>"]
    if d["hypothesis"]:
        parts.append(f"<p><b>Hypothesis.</b> {escape(d['hypothesis'])}</p>")
    parts.append("<h2>Summary</h2>")
    parts.append(_table(["what", "value"], [[r["what"], r["value"]]
                                            for r in journal["summary"]]))
    parts.append("<h2>Checks</h2>")
    rows = []
    for c in journal["checks"]:
        mark = "<span class='pass'>pass</span>" if c["passed"] else \
            "<span class='fail'>FAIL</span>"
        evidence = "".join(f"<div><code>{escape(e)}</code></div>" for e in c["evidence"][:10])
        value = "" if c["value"] is None else f"{c['value']:.4g}"
        rows.append([mark, escape(c["name"]), escape(f"{c['type']} ({c['when']})"),
                     escape(value), escape(c["expected"]), escape(c["detail"]) + evidence])
    parts.append(_table(["", "check", "type", "value", "expected", "detail"], rows, raw=True))
    charts = _charts(journal)
    if charts is None:
        parts.append(f"<h2>Charts</h2>{NO_CHARTS}")
    for title, svg in (charts or {}).items():
        parts.append(f"<h2>{escape(title)}</h2>{svg}")
    parts.append("<h2>Cohorts</h2>")
    tally = journal["tally"]["by_cohort"]
    parts.append(_table(
        ["cohort", "share", "subnets", "allowed regions", "requests", "completed", "shed",
         "refused", "lost"],
        [[name, f"{c['share']:.0%}", ", ".join(c["subnets"]),
          ", ".join(c["allowed"]) if c["allowed"] is not None else "any",
          tally[name]["total"], tally[name]["completed"], tally[name]["shed_once"],
          tally[name]["refused"], tally[name]["lost"]]
         for name, c in journal["cohorts"].items()]))
    if journal.get("tenants"):
        by_tenant = journal["tally"]["by_tenant"]
        parts.append("<h2>Tenants</h2>")
        parts.append(_table(
            ["tenant", "share", "requests per minute (quota)", "API keys (ids)", "requests",
             "completed", "shed", "lost"],
            [[name, f"{t['share']:.0%}",
              "none" if not (t["quota"] or {}).get("requests_per_minute")
              else f"{t['quota']['requests_per_minute']:g}", ", ".join(t["keys"]),
              by_tenant[name]["total"], by_tenant[name]["completed"],
              by_tenant[name]["shed_once"], by_tenant[name]["lost"]]
             for name, t in journal["tenants"].items()]))
    parts.append("<h2>Faults</h2>")
    frows = []
    for f in journal["faults"]:
        calls = "\n".join(f"{c['t']:>8}s {c['method']} {c['path']} {c.get('body') or ''} -> "
                          f"{c.get('status', c.get('error'))}" for c in f["calls"])
        when = "not injected" if f["t_start"] is None else \
            f"{f['t_start']:.2f}s to {f['t_end']:.2f}s" if f["t_end"] is not None else \
            f"{f['t_start']:.2f}s, never restored"
        frows.append([escape(f["id"]), escape(f["type"]),
                      escape(", ".join(f["regions"] or f["processes"])), escape(when),
                      escape(str(f["ttl"])), escape(f["error"] or f["restore_error"] or ""),
                      f"<pre>{escape(calls)}</pre>"])
    parts.append(_table(["fault", "type", "target", "injected", "dead-man ttl", "error",
                         "admin API calls"], frows, raw=True))
    if journal["violations"]:
        parts.append("<h2>Residency violations</h2>")
        parts.append(_table(["t", "cohort", "subnet", "evidence", "detail", "region"],
                            [[f"{v['t']:.2f}", v["cohort"], v["subnet"], v["evidence"],
                              v["detail"], v["region"] or "unknown"]
                             for v in journal["violations"][:100]]))
    lost = [r for r in journal["requests"] if r["outcome"] == "lost"]
    if lost:
        parts.append(f"<h2>Lost requests ({len(lost)})</h2>")
        parts.append(_table(["id", "cohort", "issued", "reason", "in flight at fault",
                             "attempts"],
                            [[r["id"], r["cohort"], f"{r['t_issue']:.2f}s", r["reason"],
                              r["in_flight_at_fault"] or "",
                              "; ".join(f"{a['region']}:{a['outcome']} {a['error'] or ''}"
                                        for a in r["attempts"])] for r in lost[:100]]))
    parts.append("<h2>Events</h2>")
    parts.append(_table(["t", "kind", "event"], [[f"{e['t']:.2f}s", e["kind"], e["text"]]
                                                 for e in journal["events"]]))
    if journal["errors"] or journal["warnings"]:
        parts.append("<h2>Errors and warnings</h2><ul>" + "".join(
            f"<li>{escape(x)}</li>" for x in journal["errors"] + journal["warnings"]) + "</ul>")
    parts.append("<p class='muted'>The JSON journal next to this file holds every request "
                 "and its attempts.</p></body></html>")
    return "\n".join(parts)


def write_html(journal: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(journal))
    return path
