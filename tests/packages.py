"""The repository's top-level Python packages, found on disk (every directory at the root
with an ``__init__.py``, the test suite aside): the tests that hold rules per package
check them against this, so a new package cannot slip past them."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = tuple(sorted(p.name for p in ROOT.iterdir()
                        if (p / "__init__.py").is_file() and p.name != "tests"))
