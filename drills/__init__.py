# SPDX-License-Identifier: Apache-2.0
"""Chaos failover drills: break regions or GPU servers on purpose, under realistic load,
and prove that traffic moved in time, residency held on every request, nothing was lost.

A drill file (YAML, ``docs/drills.md``) is read by ``loader`` (positions kept by
``schema``, the grammar in ``document``) into the frozen ``model``. ``prepare`` resolves it
against a running system through the admin API (``admin``, ``topology``, ``faults``,
``cohorts``, ``arrivals``, ``traces``, and ``tenant_keys`` for the tenants it sends as);
``runner`` plays it: the ``loadgen`` sends each arrival as a ``client`` request (a DNS query
with ECS by ``dnsclient``, then a streamed completion, with its tenant's API key), faults are
injected with a dead-man ttl and always restored, ``guards`` may stop it, ``progress`` shows
it live. ``records`` is what is recorded; ``accounting``, ``violations``, ``failover``,
``throttling`` and ``checks`` judge it (pure functions); ``result`` gives the
verdict and summary; ``journal``, ``html`` (with ``charts``), ``junit`` and ``reports``
write it down; ``timeline`` prints the plan for a dry run.

Exceptions (``errors``)::

    DrillError                 the drill cannot run as written (exit 3)
    ├── DrillFileError         the file does not parse or validate (positioned Diagnostics)
    ├── TargetError            a target selects nothing, or leaves the blast radius
    ├── CohortError            a cohort's subnets are not in the GeoIP database
    └── AdminApiError          the admin API refused or could not be reached
        └── InjectionError     a fault could not be injected
"""

from __future__ import annotations

import importlib
from typing import Any

# the public API, loaded on first use (the command line imports only what a command needs)
_WHERE = {
    "load_drill": "drills.loader",
    "load_drill_text": "drills.loader",
    "prepare": "drills.prepare",
    "Runner": "drills.runner",
    "write_reports": "drills.reports",
    "summary_rows": "drills.result",
    "summary_text": "drills.result",
    "render": "drills.timeline",
    "AdminClient": "drills.admin",
    "DrillError": "drills.errors",
    "DrillFileError": "drills.errors",
    "TargetError": "drills.errors",
    "CohortError": "drills.errors",
    "AdminApiError": "drills.errors",
    "InjectionError": "drills.errors",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'drills' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)

