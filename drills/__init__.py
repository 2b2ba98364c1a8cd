# SPDX-License-Identifier: Apache-2.0
"""Chaos failover drills: break regions or GPU servers on purpose, under realistic load,
and prove that traffic moved in time, residency held on every request, nothing was lost.

A drill file (YAML, ``docs/drills.md``) is read by ``loader`` (positions kept by
``schema``, the grammar in ``document``) into the frozen ``model``. ``prepare`` resolves it
against a running system through the admin API (``admin``, ``topology``, ``faults``,
``cohorts``, ``arrivals``, ``traces``); ``runner`` plays it: the ``loadgen`` sends each
arrival as a ``client`` request (a DNS query with ECS by ``dnsclient``, then a streamed
completion), faults are injected with a dead-man ttl and always restored, ``guards`` may
stop it, ``progress`` shows it live. ``records`` is what is recorded; ``accounting``,
``violations``, ``failover`` and ``checks`` judge it (pure functions); ``result`` gives the
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
