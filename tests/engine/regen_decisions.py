"""Rewrite the recorded engine decisions (``decisions.json.gz``). Run by hand, never by the
tests, and only when a decision is meant to change:

    .venv/bin/python tests/engine/regen_decisions.py

then read what changed (the script prints every case whose decision differs) before
committing the file.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
sys.path.insert(0, str(Path(__file__).resolve().parent))

from decision_corpus import FIXTURE, decide_all, read_fixture, write_fixture


def main() -> int:
    decisions = decide_all()
    before = read_fixture() if FIXTURE.exists() else {}
    changed = sorted(key for key, text in decisions.items() if before.get(key) != text)
    for key in changed:
        print(f"changed: {key}")
    write_fixture(decisions)
    print(f"{len(decisions)} cases, {len(set(decisions.values()))} distinct decisions, "
          f"{len(changed)} changed; wrote {FIXTURE.name} ({FIXTURE.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
