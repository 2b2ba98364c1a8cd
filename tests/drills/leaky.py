# SPDX-License-Identifier: Apache-2.0
"""Deliberately leaky copies of the example policy, for the negative drills.

``leaky_text()``: chat's EU rule also allows us-east, so when every EU region is down, EU
clients fail over to the US. The runtime engine answers what the policy allows, so the
drill's own residency check (EU clients: EU jurisdiction only) is what catches it.

``fallback_leak_text()``: the leak the residency proof rejects (all EU regions down ->
fall back to us-east), loaded only with the test-only switch; the engine still never
answers it (a fallback is intersected with the allowed regions), so EU clients fail closed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from policies import load_policy
from policies.model import Policy

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "policies" / "examples"
RULE = """        clients jurisdiction EU
        allow jurisdiction EU
        all-down answer-allowed  # fail static inside the EU, never cross the border"""
ALLOW_US = """        clients jurisdiction EU
        allow eu-west eu-central us-east  # LEAK: EU clients may be sent to the US
        all-down answer-allowed"""
FALLBACK_US = """        clients jurisdiction EU
        allow jurisdiction EU
        all-down fallback us-east  # LEAK: the proof rejects this"""


def _replace(new: str) -> str:
    text = (EXAMPLES / "global.dp").read_text()
    if RULE not in text:
        raise AssertionError("the example policy changed: update tests/drills/leaky.py")
    return text.replace(RULE, new, 1)


def leaky_text() -> str:
    return _replace(ALLOW_US)


def fallback_leak_text() -> str:
    return _replace(FALLBACK_US)


def write_policy(directory: Path, text: str, name: str = "leaky.dp") -> Path:
    """A policy text and the region files it includes, in ``directory``."""
    shutil.copytree(EXAMPLES / "regions", directory / "regions", dirs_exist_ok=True)
    path = directory / name
    path.write_text(text)
    return path


def load_leaky_policy(directory: Path, text: str | None = None) -> Policy:
    return load_policy(str(write_policy(directory, text or leaky_text())), prove=False)
