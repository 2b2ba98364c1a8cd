# SPDX-License-Identifier: Apache-2.0
"""A small valid drill as text, for tests that break one piece of it at a time."""

from __future__ import annotations

VALID = """\
apiVersion: drill/v1
kind: Drill
metadata:
  name: tiny
  title: A tiny drill
hypothesis: it holds
vars:
  deadline: 10s
blast_radius:
  regions: [eu-west]
targets:
  eu_west: {kind: region, select: {region: eu-west}}
load:
  service: chat
  request: {model: llama-3.1-8b-instruct, max_tokens: 8}
  rate: {rps: 4}
  phases:
    - {name: steady, duration: 10s}
    - {name: outage, duration: 20s}
  cohorts:
    - {name: eu, countries: [DE], residency: {jurisdictions: [EU]}, share: 0.5}
    - {name: us, countries: [US], share: 0.5}
method:
  - id: kill
    type: region.kill
    target: eu_west
    start: {phase: outage}
    duration: 15s
checks:
  - {name: residency-held, type: residency}
  - {name: failover, type: failover_time, fault: kill, cohorts: [eu],
     expect: {max: "${deadline}"}}
  - {name: nothing-lost, type: lost}
guards:
  stop_when:
    - {name: budget, type: error_ratio, expect: {max: 0.5}}
"""
