# SPDX-License-Identifier: Apache-2.0
"""The negative drill: ``director up`` with a deliberately leaky policy, loaded with the
test-only switch that skips the residency proof. When every EU region is down, EU clients
are answered us-east; the drill's residency check fails the drill on the first violation
(exit 1), stops it early, and restores the faults."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.drills.leaky import leaky_text, write_policy
from tests.drills.up_system import UpSystem, director_up

pytestmark = pytest.mark.long

FILES = Path(__file__).resolve().parent / "files"


@pytest.fixture(scope="module")
def leaky_system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpSystem]:
    policy = write_policy(tmp_path_factory.mktemp("policy"), leaky_text())
    with director_up(tmp_path_factory.mktemp("up"), policy,
                     "--unsafe-skip-residency-proof") as running:
        yield running


def test_the_first_violation_fails_the_drill(leaky_system: UpSystem, tmp_path: Path) -> None:
    result = leaky_system.drill(FILES / "leak-all-eu-down.yaml", tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    (path,) = tmp_path.glob("*.json")
    data = json.loads(path.read_text())
    assert data["verdict"] == "failed"
    assert data["reason"].startswith("residency violation:")
    assert "us-east" in data["reason"]
    first = data["violations"][0]
    assert first["cohort"] == "eu-resident" and first["region"] == "us-east"
    # stopped at the first violation, well before the end of the 27 s of load (5 s of
    # steady load, now 2 s: no check reads it, the violations come after the kill)
    abort = next(e for e in data["events"] if e["kind"] == "abort")
    assert abort["t"] < 22 and abort["t"] >= first["t"]
    assert max(r["t_issue"] for r in data["requests"]) <= abort["t"] + 0.5
    (fault,) = data["faults"]
    assert fault["restored"]
    assert first["t"] >= fault["t_start"]
