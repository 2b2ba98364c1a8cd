# SPDX-License-Identifier: Apache-2.0
"""mypy over every package with the configuration in ``pyproject.toml`` (``[tool.mypy]``):
untyped functions' bodies checked everywhere, ``--strict``'s rules on the packages its
overrides list (tightened package by package). A type error fails the suite."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from tests.packages import PACKAGES, ROOT


def test_every_package_is_type_checked() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert set(config["files"]) == set(PACKAGES)


def test_mypy_passes() -> None:
    out = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
