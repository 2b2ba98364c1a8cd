# SPDX-License-Identifier: Apache-2.0
"""The live progress display (rich): phase and time, requests, traffic share per region,
faults, checks and guards, refreshed on every monitor tick."""

from __future__ import annotations

from collections import Counter
from types import TracebackType
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from director.console import plain_console
from drills import accounting as acc

if TYPE_CHECKING:
    from drills.runner import Runner

SHARE_WINDOW_S = 5.0


def _phase(runner: Runner, t: float) -> str:
    start = 0.0
    for p in runner.drill.load.phases:
        if t < start + p.duration:
            return p.name
        start += p.duration
    return "draining"


def render(runner: Runner) -> Group:
    drill = runner.drill
    t = runner.clock()
    records = runner.records
    head = Table.grid(padding=(0, 2))
    head.add_row(Text(f"drill {drill.name}", style="bold"),
                 Text(f"phase {_phase(runner, t)}"),
                 Text(f"{t:5.1f}s / {drill.duration:g}s"),
                 ProgressBar(total=drill.duration, completed=min(t, drill.duration), width=30))

    tally = acc.tally(acc.classify(r, runner.run.faults) for r in records)
    in_flight = runner.loadgen.in_flight if runner.loadgen else 0
    counts = Table.grid(padding=(0, 2))
    counts.add_row(f"sent {tally.total - tally.not_sent}", f"in flight {in_flight}",
                   f"completed {tally.completed}", f"shed {tally.shed_once}",
                   f"refused {tally.refused}",
                   Text(f"lost {tally.lost} ({tally.lost_at_fault} at fault)",
                        style="red" if tally.lost else ""),
                   Text(f"violations {len(runner.run.violations)}",
                        style="bold red" if runner.run.violations else ""))

    recent: Counter[str] = Counter()
    for r in records:
        for a in r.attempts:
            if a.status is not None and a.t_start >= t - SHARE_WINDOW_S:
                recent[a.answered_region or "unknown"] += 1
    sample = runner.run.samples[-1] if runner.run.samples else None
    regions = Table(title=f"traffic share, last {SHARE_WINDOW_S:g}s", title_justify="left",
                    expand=False)
    for col in ("region", "share", "answered", "healthy", "draining"):
        regions.add_column(col)
    total = sum(recent.values()) or 1
    for name in runner.prepared.topology.names:
        state = (sample.regions.get(name) or {}) if sample else {}
        healthy = state.get("healthy")
        regions.add_row(name, f"{recent[name] / total:6.1%}", str(recent[name]),
                        Text(str(healthy), style="green" if healthy else "red"),
                        str(state.get("draining", "")))

    faults = Table(title="faults", title_justify="left")
    for col in ("fault", "type", "target", "state"):
        faults.add_column(col)
    for f in runner.run.faults:
        fault_state: Text
        if f.error:
            fault_state = Text(f"error: {f.error}", style="red")
        elif f.t_start is None:
            fault_state = Text(f"at {f.planned_start:g}s")
        elif f.t_end is None:
            fault_state = Text(f"active since {f.t_start:.1f}s", style="bold yellow")
        else:
            fault_state = Text(f"restored at {f.t_end:.1f}s", style="green")
        faults.add_row(f.id, f.type, ", ".join(f.regions or f.processes), fault_state)

    checks = Table(title="checks", title_justify="left")
    for col in ("check", "when", "state", "detail"):
        checks.add_column(col)
    for c in drill.checks:
        result = runner.judged.get(c.name) or runner.live.get(c.name)
        if result is None:
            checks.add_row(c.name, c.when.value, "waiting", "")
            continue
        style = "green" if result.passed else "red"
        checks.add_row(c.name, c.when.value, Text("pass" if result.passed else "FAIL",
                                                  style=style), result.detail[:90])
    for g in runner.guards.states:
        checks.add_row(f"guard {g.guard.name}", "guard",
                       Text("FIRED" if g.fired else f"{g.failures}/"
                            f"{g.guard.failure_threshold}",
                            style="red" if g.fired else ""), g.detail[:90])
    return Group(head, counts, regions, faults, checks)


class LiveDisplay:
    """A rich ``Live`` region on stderr; a no-op when the console is not a terminal."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or plain_console(stderr=True, soft_wrap=False)
        self.live: Live | None = None

    def __enter__(self) -> LiveDisplay:
        if self.console.is_terminal:
            self.live = Live(console=self.console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.live is not None:
            self.live.__exit__(exc_type, exc, tb)
            self.live = None

    def refresh(self, runner: Runner) -> None:
        if self.live is not None:
            self.live.update(render(runner))
