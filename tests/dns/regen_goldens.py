"""Rewrite the DNS golden answers from a live server. Run by hand, never by the tests:

    .venv/bin/python tests/dns/regen_goldens.py

then read every changed golden (``git diff tests/dns/golden``) before committing it.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
sys.path.insert(0, str(Path(__file__).resolve().parent))

from dns_helpers import GOLDEN, ROOT, ask, golden_text
from dns_protocol_cases import CASES

from director.dns.app import DnsApp
from director.dns.server import ServerConfig, ServerThread
from director.dns.snapshot_source import StaticSnapshotSource
from director.geo import GeoLocator
from policies import load_policy


def main() -> int:
    policy = load_policy(str(ROOT / "policies/examples/global.dp"))
    geo = GeoLocator()
    changed = 0
    for case in CASES:  # a fresh server per case, as the tests have
        app = DnsApp(policy, geo, StaticSnapshotSource())
        with ServerThread(app, ServerConfig(listen=(("127.0.0.1", 0),))) as server:
            text = golden_text(ask(server.addresses[0], case.build(),
                                   tcp=case.transports[0] == "tcp"))
            path = GOLDEN / f"{case.name}.txt"
            if not path.exists() or path.read_text() != text:
                path.write_text(text)
                changed += 1
                print(f"wrote {path.name}")
    print(f"{len(CASES)} cases, {changed} goldens changed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
