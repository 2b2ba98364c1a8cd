# SPDX-License-Identifier: Apache-2.0
"""Every top-level package lists its public API in ``__all__``, and every name there is
importable from the package (some load on first use)."""

from __future__ import annotations

import importlib

import pytest

from tests.packages import PACKAGES

LIBRARIES = [name for name in PACKAGES if name != "director"]
# director is the command line and the global tier's services, not a library: its
# subpackages (director.engine, director.dns, director.api, director.refresh) list theirs
SUBPACKAGES = ["director.api", "director.dns", "director.engine", "director.refresh",
               "regions.balancer", "regions.simulator"]


@pytest.mark.parametrize("name", LIBRARIES + SUBPACKAGES)
def test_the_package_lists_its_public_api(name: str) -> None:
    module = importlib.import_module(name)
    public = getattr(module, "__all__", None)
    assert public, f"{name} has no __all__"
    for item in public:
        assert getattr(module, item) is not None, f"{name}.{item}"


def test_the_packages_are_the_ones_we_ship() -> None:
    assert LIBRARIES == ["benchkit", "drills", "engines", "policies", "regions", "routing",
                         "state", "telemetry", "tenants", "workers"]
