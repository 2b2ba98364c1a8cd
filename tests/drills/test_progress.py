# SPDX-License-Identifier: Apache-2.0
"""The live display renders a running drill: phase, counts, shares, faults, checks."""

from __future__ import annotations

import io

from rich.console import Console

from drills.admin import AdminClient
from drills.progress import LiveDisplay, render
from drills.records import StatusSample
from drills.runner import Runner
from tests.drills.test_reports import recorded_run


async def test_render_a_running_drill() -> None:
    run = recorded_run()
    runner = Runner(run.prepared, AdminClient("http://127.0.0.1:1", None))
    runner.run.samples.append(StatusSample(1.0, True, {"eu-west": {"healthy": False,
                                                                   "draining": False}}))
    runner.live = {c.name: c for c in run.checks}
    console = Console(file=io.StringIO(), width=160, force_terminal=False)
    console.print(render(runner))
    text = console.file.getvalue()
    for part in ("drill tiny", "traffic share", "eu-west", "faults", "kill", "checks",
                 "residency-held", "guard budget"):
        assert part in text, text


def test_the_display_is_quiet_off_a_terminal() -> None:
    display = LiveDisplay(Console(file=io.StringIO(), force_terminal=False))
    with display:
        assert display.live is None
