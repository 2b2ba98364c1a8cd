"""Fixtures for the DNS server tests: an app over the example policy and a real server on
port 0 (UDP and TCP, IPv4 and IPv6) in a background thread."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from director.dns.app import DnsApp
from director.dns.server import ServerConfig, ServerThread
from director.dns.snapshot_source import StaticSnapshotSource
from director.engine.location_class import location_classifier
from director.geo import GeoLocator
from director.geo_map import NetworkMap
from director.geo_merge import MergedNetworks


@pytest.fixture(autouse=True, scope="session")
def _quick_thread_switches() -> Iterator[None]:
    """The server thread and the test's client share the GIL: switch often."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.0002)
    yield
    sys.setswitchinterval(old)


@pytest.fixture(scope="session")
def geolite2_map(example_policy, geolite2: GeoLocator) -> NetworkMap:
    """GeoLite2 City merged under the example policy (about ten seconds, once)."""
    return MergedNetworks(geolite2, location_classifier(example_policy)).compile_ipv4()


@pytest.fixture(scope="session")
def geolite2_map6(example_policy, geolite2: GeoLocator) -> NetworkMap:
    """GeoLite2 City's IPv6 space merged to /64 under the example policy (seconds, once)."""
    network_map = MergedNetworks(geolite2, location_classifier(example_policy)).compile_ipv6()
    assert network_map is not None
    return network_map


@pytest.fixture
def snapshots() -> StaticSnapshotSource:
    return StaticSnapshotSource()


@pytest.fixture
def app(example_policy, geolite2: GeoLocator, snapshots: StaticSnapshotSource) -> DnsApp:
    return DnsApp(example_policy, geolite2, snapshots)


@pytest.fixture
def server(app: DnsApp) -> Iterator[ServerThread]:
    config = ServerConfig(listen=(("127.0.0.1", 0), ("::1", 0)), tcp_idle_timeout=1.0)
    with ServerThread(app, config) as running:
        yield running


@pytest.fixture
def address(server: ServerThread) -> tuple[str, int]:
    return server.addresses[0]


@pytest.fixture
def keys(tmp_path) -> Path:
    """A DNSSEC key directory with one CSK of the example zone, active a minute ago."""
    from director.dnssec.key_directory import save_keys
    from director.dnssec.keys import Role, generate

    directory = tmp_path / "keys"
    save_keys(directory, [generate("infer.example.com", Role.CSK, time.time() - 60)])
    return directory
