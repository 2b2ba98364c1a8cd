"""Build a ``Client`` from an address or an ECS prefix, locating it with a ``GeoLocator``."""

from __future__ import annotations

import ipaddress

from director.engine.types import Client, ClientSource
from director.geo import GeoLocator


def client_from_address(locator: GeoLocator, address: str,
                        source: str = ClientSource.GIVEN) -> Client:
    ip = ipaddress.ip_address(address)
    network = ipaddress.ip_network((ip, ip.max_prefixlen))
    return Client(ip, network, source, locator.locate(ip))


def client_from_ecs(locator: GeoLocator, prefix: str) -> Client:
    """A client known by its EDNS Client Subnet, e.g. '81.2.69.0/24' (prefix 0: opt out)."""
    network = ipaddress.ip_network(prefix, strict=False)
    address = network.network_address
    if network.prefixlen == 0:
        return Client(address, network, ClientSource.ECS, None)
    return Client(address, network, ClientSource.ECS, locator.locate(address))
