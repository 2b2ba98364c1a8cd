# SPDX-License-Identifier: Apache-2.0
"""A benchmark script runs with ``bench/`` first on ``sys.path``, so a script named like a
package of ours would be imported in its place (``bench/routing.py`` once hid the routing
core from every benchmark that imports the balancer)."""

from __future__ import annotations

from tests.packages import PACKAGES, ROOT


def test_no_bench_script_shadows_a_package() -> None:
    scripts = {p.stem for p in (ROOT / "bench").glob("*.py")}
    assert not scripts & set(PACKAGES)
