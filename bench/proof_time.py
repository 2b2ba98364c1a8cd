# SPDX-License-Identifier: Apache-2.0
"""How long the policy gate takes for an edit that needs a service's engine proof again.

Each of ``--edits`` versions of the example policy changes the chat service's spillover
share (``max``, a new value each time), so the gate (``director.policy_gate.accept_text``)
parses, compiles and proves the policy, and runs chat's engine proof anew (2,436 decisions;
the other services' proofs are remembered, as in a writer that has gated the policy
before). Then as many edits of chat's spillover threshold (``at``), whose proof is
remembered (``policy_gate.proof_class``). Prints the median and largest gate time of each
and the proof's decisions: what a ``PUT /api/v1/policy`` of such an edit waits before its
write, on an idle core.

    .venv/bin/python bench/proof_time.py [--edits 20] [--pause 0.05]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from director import policy_gate
from policies import read_sources

POLICY = Path(__file__).resolve().parents[1] / "policies/examples/global.dp"
CHAT_SHARE = "        max 30%  #"
CHAT_SPILL = "        at 85%   #"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--edits", type=int, default=20)
    parser.add_argument("--pause", type=float, default=0.05,
                        help="seconds between edits (an operator's edits do not come back to "
                        "back, and a cold cache costs)")
    args = parser.parse_args()
    sources = read_sources(str(POLICY))
    assert sources.text.count(CHAT_SPILL) == 1 and sources.text.count(CHAT_SHARE) == 1
    files = dict(sources.files)
    policy_gate.accept_text(sources.text, sources.name, files)  # the other services' proofs
    for label, edit in (
            ("chat's spillover share (chat proven anew)",
             lambda n: sources.text.replace(CHAT_SHARE, f"        max {10 + n % 60}%  #")),
            ("chat's spillover threshold (proof remembered)",
             lambda n: sources.text.replace(CHAT_SPILL,
                                            f"        at {60 + n % 35}.{n % 10}%   #"))):
        times, decisions = [], 0
        for n in range(args.edits):
            text = edit(n)
            time.sleep(args.pause)
            started = time.perf_counter()
            acceptance = policy_gate.accept_text(text, sources.name, files)
            times.append((time.perf_counter() - started) * 1000)
            assert acceptance.ok and acceptance.engine is not None
            decisions = acceptance.engine.decisions
        print(f"gate for an edit of {label}: median {statistics.median(times):.1f} ms, "
              f"largest {max(times):.1f} ms over {args.edits} edits; the proof holds "
              f"{decisions} decisions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
