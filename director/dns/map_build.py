"""Building a policy's network maps in a process of its own.

A map build is seconds of pure Python. On a thread of the serving process it takes the
interpreter lock from the answers: measured under a full load of new subnets, a policy edit
whose classes needed a new map held the server at about a quarter of its speed for the 18 s
of the build (``bench/dns_policy_edit.py``). In a child process (``spawn``: nothing of the
server's threads is inherited) the build runs on another core where there is one, and
below the server's priority where there is not (``NICE``). The child writes the maps where
the server keeps them (``geo_map_cache``); the parent loads them from there.
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

from director.engine.location_class import location_classifier
from director.geo import GeoLocator
from director.geo_map_cache import Maps, load_maps, save_maps
from director.geo_merge import MergedNetworks
from policies.model import Policy

NICE = 10  # below the server: on a saturated core it gets about a tenth


class MapBuildFailed(RuntimeError):
    """The child ended without maps (an error, a kill, or the time ran out)."""


class MapBuild:
    """One build of ``policy``'s maps into ``folder`` under ``digest``, in a child."""

    def __init__(self, geo_path: str, policy: Policy, budget: int, folder: Path,
                 digest: str) -> None:
        self.folder, self.digest = folder, digest
        context = multiprocessing.get_context("spawn")
        self._child = context.Process(target=_build, args=(geo_path, policy, budget,
                                                           str(folder), digest),
                                      name="geoip-map-build", daemon=True)

    def run(self, timeout: float) -> Maps:
        """Start the child, wait up to ``timeout`` seconds, and load what it stored."""
        self._child.start()
        self._child.join(timeout)
        if self._child.is_alive():
            self.cancel()
            raise MapBuildFailed(f"no network map after {timeout:.0f} s")
        if self._child.exitcode != 0:
            raise MapBuildFailed(f"the map build ended with {self._child.exitcode}")
        maps = load_maps(self.folder, self.digest)
        if maps is None:
            raise MapBuildFailed("the map build stored no map")
        return maps

    def cancel(self) -> None:
        """Stop the child (a newer policy needs other maps)."""
        if self._child.is_alive():
            self._child.terminate()
            self._child.join(5)


def _build(geo_path: str, policy: Policy, budget: int, folder: str, digest: str) -> None:
    os.nice(NICE)
    merged = MergedNetworks(GeoLocator(geo_path), location_classifier(policy), budget)
    save_maps(Path(folder), digest, (merged.compile_ipv4(), merged.compile_ipv6()))
