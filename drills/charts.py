# SPDX-License-Identifier: Apache-2.0
"""The report's charts, drawn with matplotlib into inline SVG (no files, no pyplot state).

All four read the journal: traffic share per region over time (which region answered each
attempt, and the share of attempts that got no response at all), errors and sheds per
second, TTFT percentiles over time, and the fault timeline (planned and actual) with the
load's phases. Injected faults shade every time chart.
"""

from __future__ import annotations

import io
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import matplotlib
from matplotlib.figure import Figure

from drills.accounting import quantile

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")
NO_RESPONSE = "no response"
_RC = {"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False,
       "axes.spines.right": False, "svg.hashsalt": "director-drill"}


def _bin_width(duration: float) -> float:
    return max(1.0, math.ceil(duration / 90))


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    with matplotlib.rc_context(_RC):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _figure(height: float = 2.8) -> tuple[Figure, Any]:
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(9, height), layout="constrained")
        ax = fig.add_subplot()
    return fig, ax


def _shade(ax: Any, journal: dict[str, Any]) -> None:
    for f in journal["faults"]:
        if f["t_start"] is None:
            continue
        end = f["t_end"] if f["t_end"] is not None else journal["duration"]
        ax.axvspan(f["t_start"], end, color="#e15759", alpha=0.08, lw=0)
        ax.annotate(f["id"], (f["t_start"], 1.0), xycoords=("data", "axes fraction"),
                    fontsize=7, color="#a33", va="bottom")


def _attempts(journal: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for r in journal["requests"] for a in r["attempts"]]


def traffic_share(journal: dict[str, Any]) -> str:
    regions = [r["name"] for r in journal["topology"]["regions"]]
    width = _bin_width(journal["duration"])
    bins: dict[int, Counter[str]] = defaultdict(Counter)
    for a in _attempts(journal):
        if a["outcome"] == "cancelled" or (a["dns"] is None and a["status"] is None):
            continue
        region = NO_RESPONSE if a["status"] is None else \
            a["served_region"] or a["region"] or "unknown"
        bins[int(a["t_start"] // width)][region] += 1
    fig, ax = _figure()
    if bins:
        xs = [i * width for i in range(max(bins) + 1)]
        names = [r for r in regions if any(b[r] for b in bins.values())]
        names += sorted({k for b in bins.values() for k in b} - {*names, NO_RESPONSE})
        colors = list(PALETTE[:len(names)])
        if any(b[NO_RESPONSE] for b in bins.values()):
            names.append(NO_RESPONSE)
            colors.append("#d0d0d0")
        totals = [sum(bins[i].values()) or 1 for i in range(len(xs))]
        ys = [[bins[i][n] / totals[i] for i in range(len(xs))] for n in names]
        ax.stackplot(xs, ys, labels=names, colors=colors, step="post")
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.set_ylim(0, 1)
    ax.set_xlim(0, max(journal["duration"], 1))
    ax.set_ylabel("share of attempts")
    ax.set_xlabel("drill time (s)")
    _shade(ax, journal)
    return _svg(fig)


def errors_and_sheds(journal: dict[str, Any]) -> str:
    width = _bin_width(journal["duration"])
    series: dict[str, Counter[int]] = {k: Counter() for k in
                                       ("sent", "completed", "shed", "lost", "refused")}
    for r in journal["requests"]:
        if r["not_sent"]:
            continue
        i = int(r["t_issue"] // width)
        series["sent"][i] += 1
        outcome = r["outcome"]
        if outcome in ("ok", "recovered", "shed_recovered"):
            series["completed"][i] += 1
        elif outcome in ("lost", "refused"):
            series[outcome][i] += 1
        if any(a["outcome"] == "shed" for a in r["attempts"]):
            series["shed"][i] += 1
    fig, ax = _figure()
    end = int(journal["duration"] // width) + 1
    xs = [i * width for i in range(end)]
    colors = {"sent": "#999", "completed": "#59a14f", "shed": "#edc948", "lost": "#e15759",
              "refused": "#b07aa1"}
    for name, counts in series.items():
        ax.step(xs, [counts[i] / width for i in range(end)], where="post", label=name,
                color=colors[name], lw=1.4 if name != "sent" else 1.0)
    ax.set_ylabel("requests per second (by issue time)")
    ax.set_xlabel("drill time (s)")
    ax.set_xlim(0, max(journal["duration"], 1))
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    _shade(ax, journal)
    return _svg(fig)


def ttft_percentiles(journal: dict[str, Any]) -> str:
    width = _bin_width(journal["duration"]) * 2
    bins: dict[int, list[float]] = defaultdict(list)
    for a in _attempts(journal):
        if a["outcome"] == "completed" and a["t_first_token"] is not None:
            bins[int(a["t_start"] // width)].append(a["t_first_token"] - a["t_start"])
    fig, ax = _figure()
    keys = sorted(bins)
    for q, color in ((0.5, "#4e79a7"), (0.9, "#f28e2b"), (0.99, "#e15759")):
        ax.plot([k * width + width / 2 for k in keys], [quantile(bins[k], q) for k in keys],
                marker=".", label=f"p{q * 100:g}", color=color)
    ax.set_ylabel("TTFT (s)")
    ax.set_xlabel("drill time (s), attempt start")
    ax.set_xlim(0, max(journal["duration"], 1))
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    _shade(ax, journal)
    return _svg(fig)


def fault_timeline(journal: dict[str, Any]) -> str:
    phases = [e for e in journal["timeline"] if e["kind"] == "phase"]
    faults: Sequence[dict[str, Any]] = journal["faults"]
    rows = len(faults) + 1
    fig, ax = _figure(0.9 + 0.45 * rows)
    for i, p in enumerate(phases):
        end = phases[i + 1]["t"] if i + 1 < len(phases) else journal["drill"]["duration"]
        ax.barh(rows - 1, end - p["t"], left=p["t"], color=PALETTE[i % len(PALETTE)],
                alpha=0.35, edgecolor="white")
        ax.text(p["t"] + 0.3, rows - 1, p["what"].removeprefix("phase "), va="center",
                fontsize=8)
    for i, f in enumerate(faults):
        y = rows - 2 - i
        ax.barh(y, f["planned_end"] - f["planned_start"], left=f["planned_start"],
                color="none", edgecolor="#a33", hatch="//", lw=0.8)
        if f["t_start"] is not None:
            end = f["t_end"] if f["t_end"] is not None else journal["duration"]
            ax.barh(y, end - f["t_start"], left=f["t_start"], color="#e15759", alpha=0.7,
                    height=0.5)
    for e in journal["events"]:
        if e["kind"] in ("guard", "abort"):
            ax.axvline(e["t"], color="black", lw=1, ls="--")
            ax.annotate(e["kind"], (e["t"], 1.0), xycoords=("data", "axes fraction"),
                        fontsize=7, va="bottom")
    labels = [*[f"{f['id']} ({f['type']})" for f in faults][::-1], "load phases"]
    ax.set_yticks(range(rows), labels)
    ax.set_xlim(0, max(journal["duration"], journal["drill"]["duration"], 1))
    ax.set_xlabel("drill time (s): hatched = planned, solid = injected until restored")
    return _svg(fig)


def all_charts(journal: dict[str, Any]) -> dict[str, str]:
    return {
        "Traffic share per region": traffic_share(journal),
        "Errors and sheds": errors_and_sheds(journal),
        "TTFT percentiles": ttft_percentiles(journal),
        "Fault timeline": fault_timeline(journal),
    }
